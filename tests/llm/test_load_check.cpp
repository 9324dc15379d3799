// The engine checks what it loads (examples/llm/engine/load_check.h, issue 32), CPU executor: a
// generated model deployed onto an image, its record rewritten with 16 KiB chunks so that tensors lie
// in chunks of their own past the header's. 4 KiB of flipped tensor bytes are refused, naming the
// chunk, the tensor and the fix, unless --no-verify; a block_count changed after the deploy is
// refused at open even with --no-verify; a dd'ed GGUF without a record runs and says it is unchecked.
// Through the library and through the llm binary (exit status, stderr, JSON). The start's reader
// (model_reader.h) with several reads in flight: the same bytes, a mismatch or a failed read still named.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/load_check.h"
#include "examples/llm/engine/model_reader.h"
#include "host/cpu_clock.h"
#include "host/error.h"
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

// The start's reader (model_reader.h): several workers, each on a queue of its own, pieces cut small
// so that the tiny model is hundreds of them in flight at once.
namespace {

constexpr uint64_t kSmallPiece = 16u << 10;

llm::ModelReaderOptions small_pieces(uint32_t workers) { return {.workers = workers, .piece_bytes = kSmallPiece}; }

std::vector<uint8_t> read_one_at_a_time(const llm::ModelOnDevice& m) {
  std::vector<uint8_t> b(m.file->data_end());
  llm::read_model_bytes(m, 0, b.size(), b.data());
  return b;
}

// The model bytes, the device and LBA range CpuIo's message names, and the bytes the reader's note names.
struct ReadFailure {
  uint64_t lba0 = 0, lba1 = 0, byte0 = 0, byte1 = 0;
  std::string hold;
};
ReadFailure parse_failure(const std::string& e) {
  std::smatch lba, bytes;
  REQUIRE(std::regex_search(e, lba, std::regex("read of LBA ([0-9]+)\\.\\.([0-9]+)")));
  REQUIRE(std::regex_search(e, bytes, std::regex("the load at start was reading model bytes ([0-9]+)\\.\\.([0-9]+), which hold ([^)]*)\\)")));
  return {std::stoull(lba[1]), std::stoull(lba[2]), std::stoull(bytes[1]), std::stoull(bytes[2]), bytes[3]};
}

}  // namespace

TEST_CASE("load check: several reads in flight give the bytes of one read at a time, and let their queues go") {
  Image img;
  deploy_tiny(img);
  llm::DeviceSet set({img.device()});
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  const std::vector<uint8_t> want = read_one_at_a_time(m);
  REQUIRE(want.size() > 20 * kSmallPiece);
  for (const uint32_t workers : {1u, 4u, 7u}) {
    INFO(workers << " workers");
    llm::LoadCheck check(m, true, small_pieces(workers));
    // The whole model through read(), and odd ranges (not block-aligned, crossing pieces) through
    // read_staged(), their pieces gathered from the workers' threads.
    std::vector<uint8_t> got(want.size(), 0xEE);
    check.read(0, got.size(), got.data());
    CHECK(got == want);
    const std::vector<llm::LoadCheck::Range> odd{{1, 3 * kSmallPiece + 5}, {5 * kSmallPiece - 7, 100}, {want.size() - 9999, 9999}};
    std::vector<uint8_t> staged(want.size(), 0xEE);
    std::mutex mu;
    uint64_t pieces = 0, bytes = 0;
    check.read_staged(odd, [&](const uint8_t* data, uint64_t off, uint64_t n) {
      std::lock_guard lk(mu);
      std::memcpy(staged.data() + off, data, n);
      ++pieces, bytes += n;
    });
    uint64_t asked = 0;
    for (const auto& r : odd) {
      asked += r.bytes;
      CHECK(std::equal(staged.begin() + r.offset, staged.begin() + r.end(), want.begin() + r.offset));
    }
    CHECK(bytes == asked);
    CHECK(pieces >= 7);  // cut at every 16 KiB and at every range's ends
    check.finish_start();
    const llm::VerifyStats v = check.stats();
    CHECK(v.chunks_verified == v.chunks);
    CHECK(v.mismatches == 0);
    // The reader's queues were deleted: the highest id, its first, can be made again.
    host::Controller& c = set.controller(0);
    auto qp = c.create_io_queue_pair(uint16_t(c.io_queues_granted()), 16);
    c.delete_io_queue_pair(*qp);
  }
  // Its own queues, as many as asked (the emulator grants 64).
  llm::ModelReader r(m, small_pieces(5));
  CHECK(r.workers() == 5);
  CHECK(r.own_queues());
  // Staging pinned for CUDA where a GPU is, plain DMA memory where none is: the same bytes either way.
  llm::ModelReader pinned(m, {.workers = 3, .gpu_mapped = true, .piece_bytes = kSmallPiece});
  std::vector<uint8_t> got(want.size(), 0xEE);
  pinned.read(0, got.size(), [&](const uint8_t* data, uint64_t off, uint64_t n) { std::memcpy(got.data() + off, data, n); });
  CHECK(got == want);
}

TEST_CASE("load check: a CRC mismatch found by one of several workers still names the chunk and the tensor") {
  Image img;
  deploy_tiny(img);
  const Target t = flip_target(img.device());
  test::flip_bytes(img.path, t.offset, 4096);
  llm::DeviceSet set({img.device()});
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  llm::LoadCheck check(m, true, small_pieces(4));
  std::vector<uint8_t> got(m.file->data_end());
  check.read(0, got.size(), got.data());
  const std::string e = error_of([&] { check.finish_start(); });
  INFO(e);
  CHECK_THAT(e, ContainsSubstring("chunk " + std::to_string(t.chunk) + " of 'tiny-q4_k'") &&
                    ContainsSubstring("does not match the deploy record's CRC-32C") && ContainsSubstring("It holds " + t.tensor + "."));
  CHECK_THROWS_AS(check.finish_start(), llm::LoadCheckError);
}

TEST_CASE("load check: a read that fails mid-load names the device's error, the model bytes and their tensors") {
  Image img;
  deploy_tiny(img);
  // The 2nd read on each of the reader's 4 queues (64..61; the pieces are many, so some worker reads
  // twice): a media error the drive will not retry (DNR).
  std::string dev = img.device();
  for (int q = 61; q <= 64; ++q) dev += ",fault=error:op=read:q=" + std::to_string(q) + ":nth=2:sct=2:sc=0x81:dnr=1";
  llm::DeviceSet set({dev});
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  llm::LoadCheck check(m, true, small_pieces(4));
  std::vector<uint8_t> got(m.file->data_end());
  std::string e;
  try {
    check.read(0, got.size(), got.data());
  } catch (const Error& x) {
    e = x.what();
    CHECK(x.kind() == ErrorKind::kCommandFailed);
    CHECK(x.has_status());
  }
  INFO(e);
  REQUIRE(!e.empty());
  CHECK_THAT(e, ContainsSubstring("failed"));
  const ReadFailure f = parse_failure(e);
  // The failed command's blocks lie in the bytes named, and those hold the tensors named.
  const uint64_t lba = m.lba_size(), start = m.map->start_lba();
  CHECK(f.lba0 >= start + f.byte0 / lba);
  CHECK(f.lba1 < start + (f.byte1 + lba - 1) / lba);
  CHECK(f.byte1 - f.byte0 <= kSmallPiece);
  CHECK(f.hold == llm::bytes_hold(m, f.byte0, f.byte1));
  bool named = false;
  for (const auto& t : m.file->tensors())
    if (t.file_offset < f.byte1 && t.file_end() > f.byte0 && t.size_bytes) named |= f.hold.find(t.name) != std::string::npos;
  CHECK((named || f.hold.starts_with("no tensor")));
  // Through the CPU executor (the reader's default workers and pieces: the tiny model is one piece, its
  // first command on queue 64 fails), the same kind of message.
  const std::string e2 = error_of([&] { decode(img.device() + ",fault=error:op=read:q=64:nth=1:sct=2:sc=0x81:dnr=1", true); });
  CHECK_THAT(e2, ContainsSubstring("the load at start was reading model bytes "));
}

// Not run by default: the start's read rate on a device of your choosing, e.g.
//   LOAD_RATE_DEVICE=emu:gen,shape=llama3-8b,type=q4_k,threads=2 GPUNVME_LOAD_QUEUES=2 test_llm_load_check "[.rate]"
TEST_CASE("load check: the start's read rate", "[.rate]") {
  const char* d = std::getenv("LOAD_RATE_DEVICE");
  REQUIRE(d);
  llm::DeviceSet set({d});
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  std::vector<uint8_t> bytes(m.file->data_end());
  const double cpu0 = host::process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t workers = 0;
  {
    llm::LoadCheck check(m, true);
    check.read(0, bytes.size(), bytes.data());
    check.finish_start();
    const llm::VerifyStats v = check.stats();
    CHECK(v.chunks_verified == v.chunks);
    workers = llm::ModelReader(m).workers();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("load of %.2f GB: %.3f s = %.2f GB/s, process CPU %.2f s, %u workers\n", bytes.size() / 1e9, s, bytes.size() / 1e9 / s,
              host::process_cpu_seconds() - cpu0, workers);
}
