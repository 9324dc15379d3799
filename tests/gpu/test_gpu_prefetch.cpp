// The GPU expert fetcher's prefetch (MoE one-token lag): a prefetch is a fetch to the cache policy
// (the same place kernel, the same LRU rules as ExpertCachePolicy, held equal here to the CPU
// ExpertFetcher running the same id sequence), the fetch after it finds what it read as hits, and a
// prefetch issued on another stream while the previous fetch's consumer still reads its experts never
// overwrites them (bytes checked by the consumer).
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "gpu_rig.h"
#include "runtime/stream/cpu_submitter.h"
#include "runtime/stream/expert_fetcher.h"
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

constexpr uint32_t kLayers = 3, kExperts = 16, kIds = 8, kDistinct = 4;

// Token t routes at layer t % kLayers; its prediction is the routing of token t - kLayers (the
// previous token at that layer), so tokens below kLayers have none.
uint32_t layer_of(uint32_t t) { return t % kLayers; }

// The controller with the pattern written, the toy model's catalog, and the two GPU submitters: the
// fetcher's queues and the prefetches' own.
struct PrefetchRig {
  GpuRig rig;
  std::vector<uint64_t> ns_off;
  stream::ExpertCatalog catalog;
  DeviceBlob d_ns;
  stream::GpuSubmitter gpu, gpu_pf;
  PrefetchRig(const char* dev, uint64_t seed)
      : rig(dev, 4, 256, true, {}, false),
        catalog((rig.write_pattern(0, 40ull << 20, seed), make_catalog(kLayers, kExperts, rig.lba, &ns_off))),
        d_ns(ns_off.data(), ns_off.size() * 8),
        gpu(*rig.ctrl, {rig.raw[0], rig.raw[1]}, 1),
        gpu_pf(*rig.ctrl, {rig.raw[2], rig.raw[3]}, 1) {}
};

// Two fetches of slots and a little more (about 9 experts).
stream::FetcherOptions toy_options() {
  stream::FetcherOptions o;
  o.max_experts_per_fetch = kDistinct;
  o.cache_bytes = 10 * ((3 * (100 << 10)) + 3 * 4096);
  return o;
}

}  // namespace

// Both orderings: every fetch after the previous prefetch's reads (one submitter), and concurrent
// prefetches on queues of their own, where a fetch starts while the prefetch still reads (a modeled
// drive makes its reads slow enough to be caught in flight) and its hits on them wait for their bytes.
TEST_CASE("GPU expert fetcher prefetch: LRU as the CPU fetcher, hits counted, consumers' experts never overwritten",
          "[gpu][fetch]") {
  REQUIRE_GPU();
  const bool concurrent = GENERATE(false, true);
  INFO("concurrent prefetches " << concurrent);
  const uint64_t seed = 41;
  PrefetchRig pr(concurrent ? "emu:ram,size=64M,threads=4,drive=sn530" : "emu:ram,size=64M,threads=4", seed);
  GpuRig& rig = pr.rig;
  const stream::ExpertCatalog& catalog = pr.catalog;
  DeviceBlob& d_ns = pr.d_ns;
  auto cpu_qp = rig.ctrl->create_io_queue_pair(uint16_t(2 + rig.raw.size()), 64);
  stream::CpuSubmitter cpu(*rig.ctrl, *cpu_qp);
  const stream::FetcherOptions o = toy_options();
  stream::GpuExpertFetcher gf(*rig.ctrl, pr.gpu, catalog, o, concurrent ? &pr.gpu_pf : nullptr);
  stream::ExpertFetcher cf(*rig.ctrl, cpu, catalog, o);
  REQUIRE(gf.can_prefetch());
  Streams st;
  cudaStream_t pf = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&pf, cudaStreamNonBlocking) == cudaSuccess);
  DeviceZeros<uint32_t> ids(kIds), pred(kIds);

  SECTION("one token at a time: placements equal the CPU fetcher's for the same prefetch + fetch sequence") {
    const uint32_t tokens = 30;
    DeviceZeros<uint64_t> bad(tokens);
    std::vector<uint32_t> read_by_prefetch;  // experts the latest prefetch read, by the CPU fetcher's account
    uint64_t prefetches = 0, want_reads = 0, want_hits = 0, pending_hits = 0;
    for (uint32_t t = 0; t < tokens; ++t) {
      const uint32_t layer = layer_of(t);
      INFO("token " << t);
      if (t >= kLayers) {
        test::enqueue_toy_router(pf, pred.p, kIds, t - kLayers, kExperts, kDistinct);
        gf.prefetch(layer, pred.p, kIds, pf);
        std::vector<uint32_t> prev(kIds);
        for (uint32_t i = 0; i < kIds; ++i) prev[i] = test::toy_route(t - kLayers, i, kExperts, kDistinct);
        // The CPU fetcher's equivalent of the prefetch: the same policy steps; its faults are what
        // the prefetch reads.
        read_by_prefetch.clear();
        for (const stream::FetchedExpert& e : cf.fetch(layer, prev))
          if (!e.hit) read_by_prefetch.push_back(e.expert);
        cf.wait_all();
        want_reads += read_by_prefetch.size();
        ++prefetches;
      }
      test::enqueue_toy_router(st.s_compute(), ids.p, kIds, t, kExperts, kDistinct);
      gf.fetch(layer, ids.p, kIds, st.s_compute());
      test::enqueue_verify_fetch(st.s_compute(), gf, d_ns.as<uint64_t>(), layer, kExperts, seed, bad.p + t);
      const std::vector<stream::FetchedExpert> g = gf.wait();
      std::vector<stream::GpuFetchedExpert> dev(g.size());
      REQUIRE(cudaMemcpy(dev.data(), gf.device_experts(), dev.size() * sizeof(dev[0]), cudaMemcpyDeviceToHost) == cudaSuccess);
      for (const stream::GpuFetchedExpert& e : dev) {
        pending_hits += e.pending != 0;
        CHECK((e.pending == 0 || (e.hit && concurrent)));  // only a hit, only beside a concurrent prefetch
      }
      std::vector<uint32_t> chosen(kIds);
      for (uint32_t i = 0; i < kIds; ++i) chosen[i] = test::toy_route(t, i, kExperts, kDistinct);
      const std::vector<stream::FetchedExpert>& c = cf.fetch(layer, chosen);
      cf.wait_all();
      for (const stream::FetchedExpert& e : c)
        want_hits += std::count(read_by_prefetch.begin(), read_by_prefetch.end(), e.expert);
      read_by_prefetch.clear();
      REQUIRE(g.size() == c.size());
      for (size_t i = 0; i < g.size(); ++i) {
        CHECK(g[i].expert == c[i].expert);
        CHECK(g[i].hit == c[i].hit);
        CHECK(g[i].offset == c[i].offset);
      }
    }
    const std::vector<uint64_t> mism = bad.get();
    for (uint32_t t = 0; t < tokens; ++t) CHECK(mism[t] == 0);
    CHECK(gf.resident_per_layer() == cf.resident_per_layer());
    const stream::PrefetchMetrics p = gf.prefetch_metrics();
    CHECK(p.prefetches == prefetches);
    CHECK(p.reads == want_reads);
    CHECK(p.hits == want_hits);
    CHECK(p.hits + p.wasted == p.reads);
    CHECK(p.unsettled == 0);  // every prefetch was followed by its layer's fetch
    CHECK(p.reads > 0);
    if (concurrent) CHECK(pending_hits > 0);  // the case this ordering exists for did happen
    // The demand fetches: CPU fetches minus the prefetches' stand-ins; every prefetch hit is a fetch hit.
    const stream::FetcherMetrics gm = gf.metrics();
    CHECK(gm.tokens == tokens);
    CHECK(gm.hits >= p.hits);
    CHECK(p.bytes_read + gm.bytes_read == cf.metrics().bytes_read);
    REQUIRE(p.stall_seconds.size() == kLayers);
    for (double s : p.stall_seconds) CHECK(s > 0);
    // A last prefetch that no fetch follows (the end of a generation): its reads are neither hits nor
    // waste yet, but unsettled, and the counters still add up.
    {
      const uint32_t t = tokens, layer = layer_of(t);
      test::enqueue_toy_router(pf, pred.p, kIds, t - kLayers, kExperts, kDistinct);
      gf.prefetch(layer, pred.p, kIds, pf);
      std::vector<uint32_t> prev(kIds);
      for (uint32_t i = 0; i < kIds; ++i) prev[i] = test::toy_route(t - kLayers, i, kExperts, kDistinct);
      uint64_t last_reads = 0;
      for (const stream::FetchedExpert& e : cf.fetch(layer, prev)) last_reads += !e.hit;
      cf.wait_all();
      REQUIRE(cudaStreamSynchronize(pf) == cudaSuccess);
      const stream::PrefetchMetrics q = gf.prefetch_metrics();
      CHECK(last_reads > 0);
      CHECK(q.unsettled == last_reads);
      CHECK(q.reads == p.reads + last_reads);
      CHECK(q.hits + q.wasted + q.unsettled == q.reads);
    }
  }

  SECTION("back to back: each prefetch on its own stream while the previous fetch's consumer runs") {
    const uint32_t tokens = 60;
    DeviceZeros<uint64_t> bad(1);
    for (uint32_t t = 0; t < tokens; ++t) {
      const uint32_t layer = layer_of(t);
      test::enqueue_toy_router(st.s_compute(), ids.p, kIds, t, kExperts, kDistinct);
      gf.fetch(layer, ids.p, kIds, st.s_compute());
      // The next token's prefetch is enqueued before this token's consumer: it runs beside it.
      if (t + 1 >= kLayers && t + 1 < tokens) {
        test::enqueue_toy_router(pf, pred.p, kIds, t + 1 - kLayers, kExperts, kDistinct);
        gf.prefetch(layer_of(t + 1), pred.p, kIds, pf);
      }
      test::enqueue_verify_fetch(st.s_compute(), gf, d_ns.as<uint64_t>(), layer, kExperts, seed, bad.p);
    }
    gf.wait();
    CHECK(bad.get()[0] == 0);
    const stream::PrefetchMetrics p = gf.prefetch_metrics();
    CHECK(p.prefetches == tokens - kLayers);
    CHECK(p.hits + p.wasted == p.reads);
  }
  REQUIRE(cudaStreamSynchronize(pf) == cudaSuccess);
  cudaStreamDestroy(pf);
}

// FetcherOptions::cut_wrong_prefetches: predictions of another token's routing (mostly wrong) on
// queues of their own, behind a modeled drive slow enough that a fetch is placed while they still
// read. The experts a fetch does not select stop reading and leave the cache; a later fetch that
// selects one reads it again in full: every fetch's bytes are checked by its consumer, the counters
// add up, and cuts did happen.
TEST_CASE("GPU expert fetcher prefetch: a wrong prediction's reads are cut once the fetch is placed, and never served half-read",
          "[gpu][fetch]") {
  REQUIRE_GPU();
  const uint64_t seed = 43;
  PrefetchRig pr("emu:ram,size=64M,threads=4,drive=sn530", seed);
  DeviceBlob& d_ns = pr.d_ns;
  stream::FetcherOptions o = toy_options();
  o.cut_wrong_prefetches = true;
  stream::GpuExpertFetcher gf(*pr.rig.ctrl, pr.gpu, pr.catalog, o, &pr.gpu_pf);
  REQUIRE(gf.can_prefetch());
  Streams st;
  cudaStream_t pf = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&pf, cudaStreamNonBlocking) == cudaSuccess);
  DeviceZeros<uint32_t> ids(kIds), pred(kIds);
  const uint32_t tokens = 60;
  DeviceZeros<uint64_t> bad(tokens);
  for (uint32_t t = 0; t < tokens; ++t) {
    const uint32_t layer = layer_of(t);
    if (t >= kLayers) {  // the routing of a token 7 later, at this layer: rarely this token's
      test::enqueue_toy_router(pf, pred.p, kIds, t + 7, kExperts, kDistinct);
      gf.prefetch(layer, pred.p, kIds, pf);
    }
    test::enqueue_toy_router(st.s_compute(), ids.p, kIds, t, kExperts, kDistinct);
    gf.fetch(layer, ids.p, kIds, st.s_compute());
    test::enqueue_verify_fetch(st.s_compute(), gf, d_ns.as<uint64_t>(), layer, kExperts, seed, bad.p + t);
    gf.wait();
  }
  const std::vector<uint64_t> mism = bad.get();
  for (uint32_t t = 0; t < tokens; ++t) {
    INFO("token " << t);
    CHECK(mism[t] == 0);
  }
  const stream::PrefetchMetrics p = gf.prefetch_metrics();
  CHECK(p.prefetches == tokens - kLayers);
  CHECK(p.hits + p.wasted == p.reads);
  CHECK(p.cut > 0);             // the case this exists for did happen
  CHECK(p.cut <= p.wasted);     // only experts the fetch did not select
  // The bytes counted are the drive's: a cut read moved one block, and the rest it spared is in
  // cut_bytes, at most all but one block of each read of each cut expert, never in bytes_read.
  const uint64_t expert_bytes = o.cache_bytes / 10;  // toy_options: 10 slots of one expert
  CHECK(p.cut_bytes > 0);
  CHECK(p.cut_bytes < p.cut * expert_bytes);
  CHECK(p.bytes_read + p.cut_bytes <= p.reads * expert_bytes);
  CHECK(p.wasted_bytes <= p.bytes_read);
  REQUIRE(cudaStreamSynchronize(pf) == cudaSuccess);
  cudaStreamDestroy(pf);
}
