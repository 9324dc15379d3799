// The engine checks what it loads (examples/llm/engine/load_check.h, issue 32), CPU executor: a
// generated model deployed onto an image, its record rewritten with 16 KiB chunks so that tensors lie
// in chunks of their own past the header's. 4 KiB of flipped tensor bytes are refused, naming the
// chunk, the tensor and the fix, unless --no-verify; a block_count changed after the deploy is
// refused at open even with --no-verify; a dd'ed GGUF without a record runs and says it is unchecked.
// Through the library and through the llm binary (exit status, stderr, JSON).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "examples/llm/engine/executor.h"
#include "examples/llm/tools/generated_model.h"
#include "runtime/deploy/deploy.h"
#include "runtime/deploy/device.h"
#include "runtime/gguf/ggml_types.h"
#include "tests/cli_run.h"
#include "tests/test_files.h"
#include "tests/llm/greedy_steps.h"
#include "tests/llm/record_edit.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr uint32_t kShift = 14;  // 16 KiB chunks: the tiny model's 72 KiB FFN matrices hold whole chunks

// A namespace image in a fresh temporary directory (removed at the end of the scope).
struct Image {
  test_files::TempDir dir{"gpunvme-load-check"};
  std::string path = dir / "m.img";
  std::string device() const { return "emu:" + path; }
};

llm::gen::GeneratedModel tiny_model() {
  const auto layout = llm::gen::model_layout(llm::gen::shape_named("tiny"), uint32_t(gguf::GgmlType::Q4_K), "tiny-q4_k");
  return llm::gen::GeneratedModel(layout, 7, 2);
}

// The tiny model deployed on a fresh image, its record in 2^shift-byte chunks (0: the deploy's).
void deploy_tiny(const Image& img, uint32_t shift = kShift) {
  auto model = tiny_model();
  deploy::Device dev(img.device() + ",size=8M");
  deploy::deploy_source(dev, model, "tiny-q4_k");
  if (shift) test::rechunk(img.path, shift);
}

// Greedy tokens' logits of `steps` steps through the CPU executor.
std::vector<float> decode(const std::string& device, bool verify, llm::ExecStats* stats = nullptr) {
  llm::DeviceSet set({device});
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  auto ex = llm::make_cpu_executor(m, 8, verify);
  std::vector<float> all = test::greedy_logits(*ex, 4);
  if (stats) *stats = ex->stats();
  return all;
}

using test::error_of;

// A tensor of the model and a 4 KiB range inside a chunk of it that holds no other bytes.
struct Target {
  std::string tensor;
  uint64_t offset = 0;
  uint64_t chunk = 0;
};
Target flip_target(const std::string& device) {
  llm::DeviceSet set({device});
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  for (const auto& t : m.file->tensors()) {
    if (!t.name.starts_with("blk.1.") || t.size_bytes < (3u << kShift)) continue;
    const test::FlipSpot f = test::flip_spot(t.file_offset, t.file_end(), kShift);
    return {t.name, f.offset, f.chunk};
  }
  throw std::logic_error("no tensor holds a whole chunk");
}

std::string llm_bin() {
  const char* b = std::getenv("LLM_BIN");
  return b ? b : "build/examples/llm/llm";
}

}  // namespace

TEST_CASE("load check: a deployed model is checked whole at start, the same logits as unchecked") {
  Image img;
  deploy_tiny(img);
  llm::ExecStats on, off;
  const auto a = decode(img.device(), true, &on);
  const auto b = decode(img.device(), false, &off);
  CHECK(a == b);
  const model::DeployRecord r = test::read_record(img.path);
  CHECK(on.verify.record);
  CHECK(on.verify.on);
  CHECK(on.verify.chunks == r.n_chunks());
  CHECK(on.verify.chunks_verified == r.n_chunks());
  CHECK(on.verify.header_chunks >= 1);
  CHECK(on.verify.host_bytes >= r.model_bytes);
  CHECK(on.verify.mismatches == 0);
  CHECK(on.verify.start_seconds > 0);
  CHECK(!off.verify.on);
  CHECK(off.verify.chunks_verified == off.verify.header_chunks);  // the open check still ran
  CHECK_THAT(llm::verify_json(on.verify), ContainsSubstring("\"record\":true,\"on\":true,\"chunks\":" + std::to_string(r.n_chunks())));
}

TEST_CASE("load check: 4 KiB of flipped tensor bytes are refused, naming the chunk, the tensor and the fix") {
  Image img;
  deploy_tiny(img);
  const auto good = decode(img.device(), false);
  const Target t = flip_target(img.device());
  test::flip_bytes(img.path, t.offset, 4096);
  const std::string e = error_of([&] { decode(img.device(), true); });
  INFO(e);
  CHECK_THAT(e, ContainsSubstring("chunk " + std::to_string(t.chunk) + " of 'tiny-q4_k'") &&
                    ContainsSubstring("model bytes " + std::to_string(t.chunk << kShift) + ".." +
                                      std::to_string((t.chunk + 1) << kShift)) &&
                    ContainsSubstring("does not match the deploy record's CRC-32C") && ContainsSubstring("It holds " + t.tensor + ".") &&
                    ContainsSubstring("gpunvme verify --device " + img.device()) && ContainsSubstring("re-deploy"));
  // --no-verify: it runs, on the flipped bytes (the check is what stood between them and the output).
  llm::ExecStats s;
  const auto bad = decode(img.device(), false, &s);
  CHECK(bad != good);
  CHECK(!s.verify.on);
  // The same through the binary: exit 1 and the message; with --no-verify, exit 0.
  const std::string args = "--device " + img.device() + " --prompt-ids 1,2 -n 2 --path cpu";
  const auto run = cli_test::run_program(llm_bin(), args);
  CHECK(run.rc == 1);
  CHECK_THAT(run.out, ContainsSubstring("chunk " + std::to_string(t.chunk)) && ContainsSubstring(t.tensor));
  const auto json = img.dir / "run.json";
  const auto ok = cli_test::run_program(llm_bin(), args + " --no-verify --json-out " + json);
  CHECK(ok.rc == 0);
  std::ifstream jf(json);
  const std::string j((std::istreambuf_iterator<char>(jf)), std::istreambuf_iterator<char>());
  CHECK_THAT(j, ContainsSubstring("\"verify\":{\"record\":true,\"on\":false"));
}

TEST_CASE("load check: a block_count changed after the deploy is refused at open, --no-verify or not") {
  Image img;
  deploy_tiny(img);
  test::set_header_int(img.path, "llama.block_count", 1);
  const std::string e = error_of([&] {
    llm::DeviceSet set({img.device()});
    llm::open_model(set.namespaces());
  });
  INFO(e);
  CHECK_THAT(e, ContainsSubstring("chunk 0 of 'tiny-q4_k'") && ContainsSubstring("GGUF header, metadata and tensor table") &&
                    ContainsSubstring("gpunvme verify --device " + img.device()) && ContainsSubstring("re-deploy"));
  const auto run = cli_test::run_program(llm_bin(), "--device " + img.device() + " --prompt-ids 1 -n 1 --path cpu --no-verify");
  CHECK(run.rc == 1);
  CHECK_THAT(run.out, ContainsSubstring("chunk 0 of 'tiny-q4_k'"));
}

TEST_CASE("load check: with the deploy's 64 MiB chunks a small model is all header chunk, checked at open") {
  Image img;
  deploy_tiny(img, 0);
  const Target t = flip_target(img.device());
  test::flip_bytes(img.path, t.offset, 4096);
  CHECK_THAT(error_of([&] { decode(img.device(), false); }), ContainsSubstring("chunk 0 of 'tiny-q4_k'"));
}

TEST_CASE("load check: a dd'ed GGUF without a record runs unchecked and says so") {
  Image img;
  auto model = tiny_model();
  {
    std::vector<uint8_t> bytes(model.size());
    REQUIRE(model.read(0, bytes.data(), bytes.size()) == bytes.size());
    std::vector<uint8_t> zero(1u << 20, 0);
    std::FILE* f = std::fopen(img.path.c_str(), "wb");
    REQUIRE(f);
    std::fwrite(zero.data(), 1, zero.size(), f);  // dd ... seek=1 (1 MiB in, no record)
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fwrite(zero.data(), 1, zero.size(), f);
    std::fclose(f);
  }
  llm::ExecStats s;
  decode(img.device(), true, &s);
  CHECK(!s.verify.record);
  CHECK(!s.verify.on);
  CHECK(s.verify.chunks == 0);
  CHECK_THAT(llm::verify_json(s.verify), ContainsSubstring("\"record\":false"));
  const auto run = cli_test::run_program(llm_bin(), "--device " + img.device() + " --prompt-ids 1 -n 1 --path cpu");
  CHECK(run.rc == 0);
  CHECK_THAT(run.out, ContainsSubstring("no deploy record on " + img.device()) && ContainsSubstring("--record-only"));
}
