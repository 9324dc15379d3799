// The engine checks what it loads, GPU executor (examples/llm/engine/load_check.h, gpu_load_check.h):
// the GPU CRC kernel equals crc32c() on buffers of odd sizes at odd addresses, in device memory and in
// pinned host memory; a model's record rewritten with 16 KiB chunks (tests/llm/record_edit.h) so that
// each tier's layers own chunks past the header's; 4 KiB flipped in a VRAM-tier, a RAM-tier or a
// streamed layer, or in the routed experts of a fetched layer, is refused naming the chunk and the
// tensor (at start for the host-read tiers, at the first token for the GPU-checked ones); a good
// model gives the same logits with the checks on and off, and after the first token checks nothing.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "examples/llm/engine/executor.h"
#include "gpu_rig.h"
#include "llm_fixtures.h"
#include "runtime/model/crc32c.h"
#include "runtime/stream/gpu_crc.h"
#include "tests/llm/record_edit.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr uint32_t kShift = 14;  // 16 KiB chunks: every 72 KiB matrix and expert slice holds whole ones

// The tiers test's 3-layer model (llm_fixtures.h), its record rewritten in 16 KiB chunks: in 4 KiB blocks,
// whose record holds 992 chunk CRCs (the MoE model needs 356; a 512-byte block holds 96).
struct Deployed : test::DeployedModel {
  explicit Deployed(uint32_t experts) : DeployedModel(experts, "verify-test", 4096) { test::rechunk(image, kShift); }
};
using test::Opened;

std::vector<std::vector<float>> run(Opened& o, const llm::GpuExecOptions& opt, llm::ExecStats* stats,
                                    llm::ExecStats* after_first = nullptr) {
  return test::run(*o.ctrl, o.m, opt, stats, after_first);
}

test::FlipSpot flip_in(uint64_t begin, uint64_t end) { return test::flip_spot(begin, end, kShift); }
using test::error_of;

// The plan the mixed budgets give: one layer per tier (the tiers test's VRAM + RAM + NVMe).
llm::GpuExecOptions mixed(const llm::ModelOnDevice& m) {
  uint64_t widest = 0;
  for (const llm::LayerBytes& b : llm::layer_bytes(m)) widest = std::max(widest, b.dense);
  llm::GpuExecOptions o;
  o.vram_budget = widest + test::run_kv_bytes(m);  // one layer beside run()'s KV cache
  o.ram_budget = widest;
  return o;
}

}  // namespace

TEST_CASE("GPU CRC-32C kernel equals crc32c() at odd sizes and addresses, in device and pinned memory", "[verify]") {
  REQUIRE_GPU();
  std::mt19937_64 rng(5);
  const uint64_t total = (64ull << 20) + 4096;
  std::vector<uint8_t> host(total);
  for (auto& b : host) b = uint8_t(rng());
  void* dev = nullptr;
  void* pinned = nullptr;
  REQUIRE(cudaMalloc(&dev, total) == cudaSuccess);
  REQUIRE(cudaHostAlloc(&pinned, total, cudaHostAllocMapped) == cudaSuccess);
  REQUIRE(cudaMemcpy(dev, host.data(), total, cudaMemcpyHostToDevice) == cudaSuccess);
  std::memcpy(pinned, host.data(), total);
  void* pinned_dev = nullptr;
  REQUIRE(cudaHostGetDevicePointer(&pinned_dev, pinned, 0) == cudaSuccess);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  std::vector<uint64_t> sizes{0, 1, 15, 16, 17, 31, 511, 512, 513, 16383, 16385, 65536 * 3 + 7, (5u << 20) + 3, 64ull << 20};
  for (int i = 0; i < 40; ++i) sizes.push_back(rng() % (3u << 20));
  std::vector<stream::GpuCrcPiece> pieces;
  for (size_t i = 0; i < sizes.size(); ++i)
    for (const void* base : {dev, pinned_dev}) {
      const uint64_t at = (i * 37 + 3 * (base == dev)) % 4096;  // every alignment mod 16
      pieces.push_back({static_cast<const uint8_t*>(base) + at, at, sizes[i]});
    }
  stream::GpuCrcLog log(pieces.size() + 3, 7);  // batches of 7: several launches
  log.enqueue(pieces, s);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  const std::span<const stream::GpuCrcResult> r = log.take();
  REQUIRE(r.size() == pieces.size());
  for (size_t i = 0; i < r.size(); ++i) {
    INFO("piece " << i << ": " << pieces[i].bytes << " bytes at +" << pieces[i].offset);
    CHECK(r[i].offset == pieces[i].offset);
    CHECK(r[i].bytes == pieces[i].bytes);
    CHECK(r[i].crc == model::crc32c(host.data() + pieces[i].offset, pieces[i].bytes));
  }
  CHECK(log.take().empty());
  CHECK_THROWS_AS(log.enqueue(std::span(pieces).first(4), s), std::logic_error);  // past its capacity
  cudaStreamDestroy(s);
  cudaFreeHost(pinned);
  cudaFree(dev);
}

TEST_CASE("llm verify: a good model gives the same logits with the checks on and off; after the first token they cost nothing",
          "[verify]") {
  REQUIRE_GPU();
  for (const uint32_t experts : {0u, 8u}) {
    INFO("experts " << experts);
    Deployed d(experts);
    Opened o(d.device);
    llm::GpuExecOptions on = mixed(o.m), off = on;
    off.verify = false;
    llm::ExecStats son, soff, first;
    const auto a = run(o, on, &son, &first);
    const auto b = run(o, off, &soff);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) == 0);
    CHECK(son.resident_layers == 1);
    CHECK(son.ram_layers == 1);
    CHECK(son.streamed_layers == 1);
    CHECK(son.verify.on);
    CHECK(son.verify.mismatches == 0);
    CHECK(son.verify.gpu_bytes > 0);  // the streamed layer (and the fetched experts) on the GPU
    CHECK(son.verify.host_bytes > 0);
    if (!experts) {
      CHECK(son.verify.chunks_verified == son.verify.chunks);  // every chunk decided by the first token's end
      CHECK(first.verify.chunks_verified == son.verify.chunks);
      CHECK(son.verify.gpu_bytes == first.verify.gpu_bytes);  // nothing checked after it
    } else {
      CHECK(son.verify.chunks_verified > first.verify.header_chunks);  // experts' chunks as they are first fetched
    }
    CHECK(!soff.verify.on);
    CHECK(soff.verify.gpu_bytes == 0);
  }
}

TEST_CASE("llm verify: 4 KiB flipped in a VRAM, RAM or streamed layer is refused, naming the chunk and the tensor", "[verify]") {
  REQUIRE_GPU();
  for (const llm::Tier tier : {llm::Tier::kVram, llm::Tier::kRam, llm::Tier::kNvme}) {
    Deployed d(0);
    std::string tensor;
    test::FlipSpot f;
    llm::GpuExecOptions opt;
    {
      Opened o(d.device);
      opt = mixed(o.m);
      const llm::ResidencyPlan plan = llm::plan_residency(llm::layer_bytes(o.m), {*opt.vram_budget, opt.ram_budget},
                                                          llm::KvPlan{.slots = 1, .ctx = 8, .bytes = test::run_kv_bytes(o.m)});
      uint32_t layer = 0;
      while (plan.layers[layer].dense != tier) ++layer;
      tensor = "blk." + std::to_string(layer) + ".ffn_down.weight";
      const auto* t = o.m.map->find(tensor);
      REQUIRE(t);
      f = flip_in(t->tensor->file_offset, t->tensor->file_end());
    }
    test::flip_bytes(d.image, f.offset, 4096);
    Opened o(d.device);  // the header chunk is intact: the model opens
    INFO("tier " << int(tier) << ", " << tensor << ", chunk " << f.chunk);
    const std::string e = error_of([&] {
      auto ex = llm::make_gpu_executor(*o.ctrl, o.m, 8, opt);
      if (tier == llm::Tier::kNvme) CHECK(ex->stats().verify.mismatches == 0);  // streamed: found at its first read
      ex->step(3, 0);
    });
    CHECK_THAT(e, ContainsSubstring("chunk " + std::to_string(f.chunk) + " of 'verify-test'") &&
                      ContainsSubstring("does not match the deploy record's CRC-32C") &&
                      ContainsSubstring("It holds " + tensor + ".") && ContainsSubstring("gpunvme verify --device emu:" + d.image));
    // --no-verify runs on the flipped bytes.
    llm::GpuExecOptions off = opt;
    off.verify = false;
    llm::ExecStats s;
    CHECK_NOTHROW(run(o, off, &s));
  }
}

TEST_CASE("llm verify: flipped routed experts are refused at the first token that fetches one", "[verify]") {
  REQUIRE_GPU();
  Deployed d(8);
  llm::GpuExecOptions opt;
  std::vector<test::FlipSpot> flips;
  {
    Opened o(d.device);
    const uint64_t dense = test::dense_bytes(o.m);
    opt.vram_budget = dense + test::run_kv_bytes(o.m);  // every dense part in VRAM (beside the KV cache), every layer's experts fetched
    // Every expert's down projection of layer 0: whichever two the router picks, one is flipped.
    for (const model::ExpertExtent& e : o.m.map->experts())
      if (e.layer == 0 && e.proj == model::Projection::kDown) flips.push_back(flip_in(e.file_offset, e.file_offset + e.extent.byte_length));
    REQUIRE(flips.size() == 8);
  }
  for (const test::FlipSpot& f : flips) test::flip_bytes(d.image, f.offset, 4096);
  Opened o(d.device);
  std::string e;
  {
    auto ex = llm::make_gpu_executor(*o.ctrl, o.m, 8, opt);  // nothing flipped was read at start
    CHECK(ex->stats().has_experts);
    e = error_of([&] { ex->step(3, 0); });
  }
  INFO(e);
  CHECK_THAT(e, ContainsSubstring("does not match the deploy record's CRC-32C") &&
                    ContainsSubstring("It holds blk.0.ffn_down_exps.weight.") && ContainsSubstring("re-deploy"));
  llm::GpuExecOptions off = opt;
  off.verify = false;
  llm::ExecStats s;
  CHECK_NOTHROW(run(o, off, &s));
}
