// emu:gen (examples/llm/tools/emu_gen.h): the generated namespace is, byte for byte, the image
// llm_make_model's deploy leaves (record included), on tiny shapes of the three layouts (gpt-oss in its
// MXFP4 mix) and both block sizes; its record checks (verify_model: every chunk's CRC) and the engine
// decodes from it what it decodes from the image, finite logits; the parallel CRC pass equals deploy's
// serial one over several pieces and chunks; a striped set of generated members decodes as the single
// namespace; writes are refused (the write guard, and the emulator's Namespace Is Write Protected); bad
// keys are refused naming the fix.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "examples/llm/engine/executor.h"
#include "examples/llm/tools/emu_gen.h"
#include "runtime/deploy/deploy.h"
#include "runtime/deploy/device.h"
#include "runtime/deploy/safety.h"
#include "runtime/gguf/ggml_types.h"
#include "runtime/guard/write_guard.h"
#include "runtime/model/detect.h"
#include "runtime/model/lba_map.h"
#include "runtime/model/stripe.h"
#include "tests/llm/greedy_steps.h"
#include "tests/test_files.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;

namespace {

std::vector<uint8_t> read_device(const std::string& device) {
  deploy::Device dev(device, 1, host::Access::kReadOnly);
  const model::BlockIo& io = dev.block_io();
  std::vector<uint8_t> out(io.n_lbas * io.lba_size);
  const uint64_t step = (1u << 20) / io.lba_size;
  for (uint64_t lba = 0; lba < io.n_lbas; lba += step) {
    const uint64_t n = std::min(step, io.n_lbas - lba);
    io.read(lba, uint32_t(n), out.data() + lba * io.lba_size);
  }
  return out;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<float> decode(const std::vector<std::string>& devices) {
  llm::DeviceSet set(devices);
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  auto ex = llm::make_cpu_executor(m, 8, true);
  return test::greedy_logits(*ex, 3);
}

// The error opening `device` read-only gives, or "opened".
std::string refused(const std::string& device) {
  try {
    deploy::Device x(device, 1, host::Access::kReadOnly);
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
  return std::string("opened");
}

}  // namespace

TEST_CASE("emu:gen is the image llm_make_model deploys, byte for byte, and the engine runs on it") {
  struct Case {
    const char* shape;
    const char* type;
    uint32_t lba;
  };
  for (const Case& c : {Case{"tiny", "q4_k", 512}, Case{"tiny-qwen3moe", "q6_k", 4096}, Case{"tiny-gpt-oss", "mxfp4", 512},
                        Case{"tiny-gemma3", "q8_0", 4096}}) {
    INFO(c.shape << " " << c.type << " lba " << c.lba);
    const std::string lba = ",lba=" + std::to_string(c.lba);
    const std::string gen = std::string("emu:gen,shape=") + c.shape + ",type=" + c.type + ",model_seed=5" + lba;
    const auto image = llm::gen::generated_image(gen);
    REQUIRE(image);
    // What llm_make_model --seed 5 --device emu:IMAGE,size=N does, on an image of the namespace's size.
    test_files::TempDir dir("gpunvme-emu-gen");
    const std::string file = dir / "m.img", dev = "emu:" + file + lba;
    const llm::gen::Shape shape = llm::gen::shape_named(c.shape);
    const uint32_t type = llm::gen::type_named(c.type);
    llm::gen::GeneratedModel model(llm::gen::model_layout(shape, type, llm::gen::model_name(shape, type)), 5, 2);
    {
      deploy::Device d(dev + ",size=" + std::to_string(image->bytes()));
      deploy::deploy_source(d, model, llm::gen::model_name(shape, type));
    }
    const std::vector<uint8_t> written = read_file(file), generated = read_device(gen);
    REQUIRE(written.size() == image->bytes());
    CHECK(generated == written);
    // Its record describes it: every chunk's CRC matches what the namespace returns.
    deploy::Device d(gen, 1, host::Access::kReadOnly);
    const model::DetectedModel found = model::detect_model(d.block_io());
    REQUIRE(found.record.has_value());
    CHECK(found.record->name == llm::gen::model_name(shape, type));
    CHECK(model::verify_model(d.block_io(), *found.record).empty());
    // Another seed is another model.
    CHECK(read_device(std::string("emu:gen,shape=") + c.shape + ",type=" + c.type + lba) != generated);
    // The engine (CPU executor, load checks on) decodes the same logits from both, finite ones.
    const std::vector<float> logits = decode({gen});
    CHECK(logits == decode({dev}));
    CHECK(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }));
  }
}

TEST_CASE("emu:gen members=N,member=I: a striped set of the model, which the engine reads as one") {
  // tiny-qwen3moe (2 MB) over 3 members of 128 KiB stripe units (its default): every member holds units of it.
  const std::string gen = "emu:gen,shape=tiny-qwen3moe,type=q4_k";
  std::vector<std::string> members;
  for (int i = 1; i <= 3; ++i) members.push_back(gen + ",members=3,member=" + std::to_string(i));
  const std::vector<float> one = decode({gen});
  CHECK(decode(members) == one);
  // Given out of order, the set is refused naming the member (stripe.h's checks hold for it too).
  CHECK_THROWS(decode({members[1], members[0], members[2]}));
  CHECK_THAT(refused(gen + ",members=2"), ContainsSubstring("member=1..2"));
  CHECK_THAT(refused(gen + ",members=2,member=3"), ContainsSubstring("past members=2"));
}

TEST_CASE("the default stripe unit of the generated shapes: a quarter of the smallest expert slice, 128K-1M") {
  struct Case {
    const char* shape;
    const char* type;
    uint64_t slice;  // the smallest expert slice; 0: no routed experts
    uint64_t unit;
  };
  for (const Case& c : {Case{"qwen3-30b-a3b", "q4_k", 884736, 128u << 10},      // 768 x 2048 Q4_K
                        Case{"qwen3-30b-a3b", "q6_k", 1290240, 256u << 10},     // the same in Q6_K
                        Case{"qwen3-235b-a22b", "q4_k", 3538944, 512u << 10},   // 1536 x 4096
                        Case{"gpt-oss-20b", "mxfp4", 4406400, 1u << 20},        // 2880 x 2880 MXFP4
                        Case{"gpt-oss-120b", "mxfp4", 4406400, 1u << 20},
                        Case{"mixtral-8x7b", "q4_k", 33030144, 1u << 20},       // 14336 x 4096
                        Case{"llama3-70b", "q6_k", 0, 1u << 20}}) {
    INFO(c.shape << " " << c.type);
    const llm::gen::Shape shape = llm::gen::shape_named(c.shape);
    const uint32_t type = llm::gen::type_named(c.type);
    llm::gen::GeneratedModel m(llm::gen::model_layout(shape, type, "unit"), 1, 1);
    const gguf::GgufFile header = gguf::GgufFile::read(m);  // the header only: nothing generated
    const model::LbaMap map(header, 512, 0);
    uint64_t smallest = 0;
    for (const model::ExpertExtent& e : map.experts())
      smallest = smallest ? std::min(smallest, e.extent.byte_length) : e.extent.byte_length;
    CHECK(smallest == c.slice);
    CHECK(model::default_stripe_unit(header) == c.unit);
  }
}

TEST_CASE("emu:gen members=N without stripe_unit= lays the set with the model's default unit") {
  // The stripe record says the unit; the members are byte for byte those of the unit given explicitly
  // (set ids included: the default is resolved before the keys are hashed), and not those of another.
  auto unit_of = [](const std::string& device) {
    const std::vector<uint8_t> b = read_device(device);
    return model::parse_stripe_record(std::span(b).first(512), device).geometry.unit_bytes();
  };
  const std::string moe = "emu:gen,shape=tiny-qwen3moe,type=q4_k,members=2,member=";
  CHECK(unit_of(moe + "1") == 128u << 10);  // slices of 36864 bytes
  for (const char* member : {"1", "2"}) {
    CHECK(read_device(moe + member) == read_device(moe + member + ",stripe_unit=131072"));
    CHECK(read_device(moe + member) != read_device(moe + member + ",stripe_unit=1048576"));
  }
  CHECK(unit_of("emu:gen,shape=tiny,type=q4_k,members=2,member=2") == 1u << 20);  // dense
  CHECK(unit_of("emu:gen,shape=tiny-gpt-oss,type=mxfp4,members=2,member=1") == 128u << 10);
}

TEST_CASE("the parallel CRC pass is deploy's, over pieces and chunks") {
  // About 224 MB: two 128 MiB chunks of two 64 MiB pieces each, the last one short.
  llm::gen::Shape s{"crc", 4, 2048, 16, 4, 8192, 32000, 512};
  const llm::gen::GeneratedModel m(llm::gen::model_layout(s, uint32_t(gguf::GgmlType::Q4_K), "crc"), 3, 2);
  REQUIRE(m.size() > (3ull << 26));
  llm::gen::GeneratedModel serial(llm::gen::model_layout(s, uint32_t(gguf::GgmlType::Q4_K), "crc"), 3, 1);
  CHECK(llm::gen::parallel_chunk_crcs(m, 27, 2) == model::compute_chunk_crcs(serial, serial.size(), 27));
}

TEST_CASE("emu:gen refuses writes and bad keys, naming the fix") {
  const std::string gen = "emu:gen,shape=tiny,type=q4_k";
  try {
    guard::check_write_allowed(gen, {true, true}, "llm_make_model writes a model");
    FAIL("a write to emu:gen was allowed");
  } catch (const deploy::RefusedError& e) {
    CHECK_THAT(e.what(), ContainsSubstring("read-only") && ContainsSubstring("image file"));
  }
  // Past the guard, the emulator itself: Namespace Is Write Protected, and the bytes unchanged.
  deploy::Device d(gen);
  std::vector<uint8_t> block(512, 0xAB), before(512), after(512);
  d.block_io().read(3000, 1, before.data());  // inside the model (LBA 2048 on)
  try {
    d.block_io().write(3000, 1, block.data());
    FAIL("the emulator took a write to emu:gen");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), ContainsSubstring("Write Protected"));
  }
  d.block_io().read(3000, 1, after.data());
  CHECK(after == before);
  CHECK_THAT(refused("emu:gen,shape=tiny"), ContainsSubstring("type="));
  CHECK_THAT(refused("emu:gen,shape=huge,type=q4_k"), ContainsSubstring("tiny-qwen3moe"));
  CHECK_THAT(refused("emu:gen,shape=tiny,type=q5_k"), ContainsSubstring("q4_k, q6_k, q8_0 or mxfp4"));
  CHECK_THAT(refused("emu:gen,shape=gpt-oss-20b,type=q8_0"), ContainsSubstring("takes type mxfp4"));
  CHECK_THAT(refused("emu:gen,shape=gpt-oss-120b,type=q4_k"), ContainsSubstring("takes type mxfp4"));
  CHECK_THAT(refused("emu:gen,shape=tiny,type=mxfp4"), ContainsSubstring("has no experts"));
  CHECK_THAT(refused("emu:gen,shape=tiny,type=q4_k,size=1G"), ContainsSubstring("size="));
  CHECK_THAT(refused("emu:gen,shape=tiny,type=q4_k,model_seed=x"), ContainsSubstring("model_seed"));
  CHECK_THAT(refused("emu:ram,shape=tiny"), ContainsSubstring("unknown key \"shape\""));
}
