// The GPU expert fetcher's overlapped fetch (fetch_overlapped + wait_part): the reads run on the
// fetcher's stream, and the consumer's stream waits per routing id and projection for the readiness
// word of that part only. The consumer kernels check, with no spinning of their own, that the word
// holds the fetch's token and that every byte of the part is the namespace's; a failed read still
// ends the waits (the part is flagged failed, the host's wait() throws), in bounded time. Any read
// window (FetcherOptions::read_window_bytes) gives the same bytes; a large part's slices are each
// in place when their own wait ends.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cuda_runtime.h>

#include <chrono>
#include <thread>
#include <vector>

#include "gpu_rig.h"
#include "host/error.h"
#include "runtime/stream/gpu_expert_fetcher.h"
#include "runtime/stream/gpu_submitter.h"
#include "stream_check.h"
#include "stream_fixtures.h"

using namespace gpunvme;
using test::DeviceBlob;
using test::DeviceZeros;
using test::GpuRig;
using test::make_catalog;
using test::Streams;

namespace {

// The fetches' shape: layers and experts of the catalog, routing ids per token and distinct experts
// among them, and each part's size (a little more for each projection and expert).
struct Shape {
  uint32_t layers = 3, experts = 16, ids = 8, distinct = 4;
  uint64_t part_bytes = 96 << 10;
};
constexpr model::Projection kProjections[] = {model::Projection::kGate, model::Projection::kUp, model::Projection::kDown};

// The stream's work, waited for by polling with a bound: a wait that never ends fails the test
// instead of hanging it.
bool finishes_within(cudaStream_t s, std::chrono::seconds bound) {
  const auto end = std::chrono::steady_clock::now() + bound;
  while (cudaStreamQuery(s) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return cudaStreamQuery(s) == cudaSuccess;
}

struct OverlapRun {
  uint32_t tokens_failed = 0;   // tokens whose wait() threw
  uint64_t mismatches = 0;      // bad bytes, and readiness words not set when the stream went on
  uint64_t failed_parts = 0;    // parts a consumer found flagged failed
  std::string first_error;
};

// `tokens` tokens: router, overlapped fetch, then per routing id, projection and slice a wait and a
// check of the part's bytes up to that slice's end.
OverlapRun run_tokens(GpuRig& rig, uint64_t seed, const stream::FetcherOptions& o, uint32_t tokens, const Shape& sh = {}) {
  std::vector<uint64_t> ns_off;
  const stream::ExpertCatalog catalog = make_catalog(sh.layers, sh.experts, rig.lba, &ns_off, sh.part_bytes);
  DeviceBlob d_ns(ns_off.data(), ns_off.size() * 8);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1);
  stream::GpuExpertFetcher gf(*rig.ctrl, gpu, catalog, o);
  REQUIRE(gf.can_overlap());
  Streams st;
  DeviceZeros<uint32_t> ids(sh.ids);
  DeviceZeros<uint64_t> bad(1), failed(1);
  OverlapRun r;
  const uint32_t want_slices = stream::part_slices(sh.part_bytes + 2 * 257 + 31 * (sh.experts - 1));
  for (uint32_t t = 0; t < tokens; ++t) {
    const uint32_t layer = t % sh.layers;
    test::enqueue_toy_router(st.s_compute(), ids.p, sh.ids, t, sh.experts, sh.distinct);
    gf.fetch_overlapped(layer, ids.p, sh.ids, st.s_compute());
    for (uint32_t k = 0; k < sh.ids; ++k)
      for (const model::Projection proj : kProjections) {
        REQUIRE(gf.part_slices(proj) == want_slices);
        for (uint32_t x = 0; x < want_slices; ++x) {
          gf.wait_slice(k, proj, x, st.s_compute());
          test::enqueue_verify_part(st.s_compute(), gf.device_result(), gf.device_experts(), gf.device_selection(),
                                    gf.device_part_ready(), static_cast<const uint8_t*>(gf.scratchpad().device()),
                                    d_ns.as<uint64_t>(), layer, sh.experts, k, uint32_t(proj), seed, bad.p, failed.p, x);
        }
        gf.wait_part(k, proj, st.s_compute());  // every slice: passes at once now
      }
    INFO("token " << t);
    REQUIRE(finishes_within(st.compute, std::chrono::seconds(20)));
    try {
      gf.wait();
    } catch (const Error& e) {
      if (r.tokens_failed++ == 0) r.first_error = e.what();
    }
  }
  r.mismatches = bad.get()[0];
  r.failed_parts = failed.get()[0];
  // Misuse: a routing id past the last fetch's, a projection that is none.
  CHECK_THROWS_WITH(gf.wait_part(sh.ids, model::Projection::kGate, st.s_compute()),
                    Catch::Matchers::ContainsSubstring("names no part of the last fetch"));
  CHECK_THROWS_WITH(gf.wait_slice(0, model::Projection::kGate, stream::kMaxPartSlices, st.s_compute()),
                    Catch::Matchers::ContainsSubstring("slices at most"));
  return r;
}

}  // namespace

TEST_CASE("GPU expert fetcher, overlapped: every part is in place when its wait ends, bytes checked", "[gpu][overlap]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=64M,threads=4", 2, 256, true, {}, false);
  const uint64_t seed = 57;
  rig.write_pattern(0, 40ull << 20, seed);
  const bool cached = GENERATE(true, false);
  // The read window: the default (8 MiB: every read of a fetch here), one read per queue at a time
  // (the reads end in the list's order), all at once.
  const uint64_t window = GENERATE(stream::FetcherOptions{}.read_window_bytes, uint64_t(1), uint64_t(0));
  INFO((cached ? "with" : "without") << " a cache, read window " << window);
  stream::FetcherOptions o;
  o.max_experts_per_fetch = Shape{}.distinct;
  o.read_window_bytes = window;
  // Without a cache every fetch packs its experts at the scratchpad's start, over the bytes the
  // previous token's consumers read: the next fetch must wait for them (the routing event).
  o.cache_bytes = cached ? 10 * ((3 * (100 << 10)) + 3 * 4096) : 0;
  const OverlapRun r = run_tokens(rig, seed, o, 30);
  CHECK(r.tokens_failed == 0);
  CHECK(r.mismatches == 0);
  CHECK(r.failed_parts == 0);
}

TEST_CASE("GPU expert fetcher, overlapped: a failed read ends the waits and is flagged; later tokens read",
          "[gpu][overlap]") {
  REQUIRE_GPU();
  // The 40th read fails with DNR set (no retry): a final error on one part of one token.
  GpuRig rig("emu:ram,size=64M,threads=4,fault=error:op=read:sc=0x81:dnr=1:nth=40", 2, 256, true, {}, false);
  const uint64_t seed = 58;
  rig.write_pattern(0, 40ull << 20, seed);
  stream::FetcherOptions o;
  o.max_experts_per_fetch = Shape{}.distinct;
  const OverlapRun r = run_tokens(rig, seed, o, 12);
  CHECK(r.tokens_failed == 1);
  CHECK(r.first_error.find("LBA") != std::string::npos);
  CHECK(r.failed_parts >= 1);   // every routing id naming that expert sees it failed, on its projections
  CHECK(r.mismatches == 0);     // no consumer read a part whose word was not set, nor bad bytes of a good one
}

TEST_CASE("GPU expert fetcher, overlapped: a large part is waited for slice by slice, each slice's bytes checked",
          "[gpu][overlap]") {
  REQUIRE_GPU();
  // Parts of 9 MiB and a little: three 4 MiB slices (gpu_fetch_types.h), read in 256 KiB pieces so
  // that slices end one after the other; two layers of three experts, two distinct per token.
  GpuRig rig("emu:ram,size=192M,threads=4", 2, 256, true, {}, false);
  const uint64_t seed = 59;
  rig.write_pattern(0, 184ull << 20, seed);
  const Shape big{.layers = 2, .experts = 3, .ids = 4, .distinct = 2, .part_bytes = 9ull << 20};
  STATIC_REQUIRE(stream::part_slices((9ull << 20) + 600) == 3);
  const uint64_t window = GENERATE(uint64_t(8) << 20, uint64_t(0));
  INFO("read window " << window);
  stream::FetcherOptions o;
  o.max_experts_per_fetch = big.distinct;
  o.max_command_bytes = 256 << 10;
  o.read_window_bytes = window;
  const OverlapRun r = run_tokens(rig, seed, o, 8, big);
  CHECK(r.tokens_failed == 0);
  CHECK(r.mismatches == 0);
  CHECK(r.failed_parts == 0);
}
