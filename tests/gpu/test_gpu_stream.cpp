// The runtime on the GPU path: the layer streamer with a GpuSubmitter (a kernel issues each layer's
// reads, CUDA streams order the consumer) and the GPU expert fetcher (routing ids in GPU memory ->
// reads, per-expert readiness), against the emulated controller. Consumer kernels check every byte
// against the namespace pattern. Skips, with the reason, where no CUDA GPU is present.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <vector>

#include "gpu_rig.h"
#include "host/error.h"
#include "runtime/model/lba_map.h"
#include "runtime/stream/cpu_submitter.h"
#include "runtime/stream/expert_cache_policy.h"
#include "runtime/stream/expert_fetcher.h"
#include "runtime/stream/gpu_expert_fetcher.h"
#include "runtime/stream/gpu_submitter.h"
#include "runtime/stream/layer_streamer.h"
#include "stream_check.h"
#include "stream_fixtures.h"

using namespace gpunvme;
using test::VerifySpan;
using test::DeviceBlob;
using test::GpuRig;
using test::DeviceZeros;
using test::Streams;
using test::make_catalog;
using test::make_layers;
using test::pieces_of;

TEST_CASE("GPU layer streamer: double-buffered on CUDA streams, every byte checked by the consumer kernel",
          "[gpu][stream]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=64M,threads=4", 4, 256, true, {}, false);
  const uint64_t seed = 21;
  const uint32_t L = 8;
  rig.write_pattern(0, 48ull << 20, seed);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1);
  stream::LayerStreamer s(*rig.ctrl, gpu, make_layers(L, rig.lba), {.slots = 2, .max_command_bytes = 128 << 10});
  Streams st;
  // Every layer's pieces, in device memory, for both slots (the plans differ per slot only in PRPs).
  std::vector<std::unique_ptr<DeviceBlob>> pieces(L);
  std::vector<uint32_t> n_pieces(L);
  DeviceZeros<uint64_t> bad(L);
  DeviceZeros<uint32_t> seen(L);
  // The consumer spins 3 ms before reading: if a begin() into its slot did not wait for its release,
  // the next-but-one layer's reads would land during the spin and the check would fail.
  const uint64_t spin_ns = 3'000'000;
  s.begin(0, 0, st.s_io());
  for (uint32_t l = 0; l < L; ++l) {
    if (l + 1 < L) s.begin(l + 1, (l + 1) % 2, st.s_io());
    const stream::SlotView v = s.wait(l % 2, st.s_compute());
    REQUIRE(v.device != nullptr);
    REQUIRE(v.status != nullptr);
    const std::vector<VerifySpan> p = pieces_of(v, rig.lba);
    pieces[l] = std::make_unique<DeviceBlob>(p.data(), p.size() * sizeof(VerifySpan));
    n_pieces[l] = uint32_t(p.size());
    test::enqueue_verify_slot(st.s_compute(), static_cast<const uint8_t*>(v.device), pieces[l]->as<VerifySpan>(),
                              n_pieces[l], seed, spin_ns, v.status, bad.p + l, seen.p + l);
    s.release(l % 2, st.s_compute());
  }
  s.sync();
  const std::vector<uint64_t> mism = bad.get();
  const std::vector<uint32_t> states = seen.get();
  for (uint32_t l = 0; l < L; ++l) {
    INFO("layer " << l);
    CHECK(mism[l] == 0);
    CHECK(states[l] == stream::ticket_state::kOk);
  }
  const stream::StreamStats& stats = s.stats();
  CHECK(stats.layers == L);
  CHECK(stats.per_layer.size() == L);
  uint64_t want_bytes = 0;
  for (uint32_t l = 0; l < L; ++l) want_bytes += s.plan(l, l % 2).read_bytes;
  CHECK(stats.bytes == want_bytes);
  for (const auto& t : stats.per_layer) CHECK(t.io_ms > 0);
  // The compute stream was busy 3 ms a layer: from layer 1 on, the reads were hidden behind it.
  CHECK(stats.wait_seconds < stats.elapsed_seconds);
  CHECK(gpu.commands_completed() > L * 3);

  SECTION("the check above would catch a slot overwritten while its consumer still reads it") {
    // Negative control: layer 2's reads into slot 0 issued with no ordering after the consumer of
    // layer 0 (which spins 20 ms first): its bytes change under it.
    s.begin(0, 0, st.s_io());
    const stream::SlotView v = s.wait(0, st.s_compute());
    DeviceZeros<uint64_t> bad2(1);
    DeviceZeros<uint32_t> seen2(1);
    test::enqueue_verify_slot(st.s_compute(), static_cast<const uint8_t*>(v.device), pieces[0]->as<VerifySpan>(),
                              n_pieces[0], seed, 20'000'000, v.status, bad2.p, seen2.p);
    cudaStream_t rogue = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&rogue, cudaStreamNonBlocking) == cudaSuccess);
    cudaStreamSynchronize(st.io);
    const uint64_t t = gpu.issue_on(s.plan(2, 0).commands, reinterpret_cast<stream::cuda_stream_t>(rogue));
    gpu.wait(t);
    CHECK(bad2.get()[0] > 0);
    s.release(0, st.s_compute());
    s.sync();
    cudaStreamDestroy(rogue);
  }
}

TEST_CASE("GPU layer streamer: a failed read reaches the consumer's status word and sync() names its LBA",
          "[gpu][stream][faults]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=64M,threads=2", 2, 128, true, {}, false);
  rig.write_pattern(0, 48ull << 20, 5);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1, {.timeout_ns = 500'000'000});
  stream::LayerStreamer s(*rig.ctrl, gpu, make_layers(4, rig.lba), {.slots = 2});
  emu::Fault f;
  f.kind = emu::FaultKind::kErrorStatus;
  f.qid = 2;  // the first GPU queue
  f.nth = 3;
  f.sc = 0x81;  // LBA Out of Range... any NVM status: the point is that it arrives
  f.dnr = true;  // with DNR clear the kernel would retry it (test_gpu_recovery.cpp)
  const int id = rig.emu->faults().add(f);
  Streams st;
  DeviceZeros<uint64_t> bad(1);
  DeviceZeros<uint32_t> seen(1);
  s.begin(0, 0, st.s_io());
  const stream::SlotView v = s.wait(0, st.s_compute());
  test::enqueue_verify_slot(st.s_compute(), static_cast<const uint8_t*>(v.device), nullptr, 0, 5, 0, v.status, bad.p,
                            seen.p);
  s.release(0, st.s_compute());
  try {
    s.sync();
    FAIL("sync() did not report the failed read");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kCommandFailed);
    CHECK(std::string(e.what()).find("LBA") != std::string::npos);
    CHECK(e.has_status());
  }
  CHECK(rig.emu->faults().fired(id) == 1);
  CHECK(seen.get()[0] == stream::ticket_state::kFailed);
  // The streamer and its queues go on: the next layer streams fine.
  s.begin(1, 1, st.s_io());
  s.wait(1, st.s_compute());
  s.release(1, st.s_compute());
  s.sync();
}

TEST_CASE("GPU layer streamer refuses misuse with clear errors", "[gpu][stream]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=64M,threads=1", 1, 64, true, {}, false);
  stream::CpuSubmitter cpu(*rig.ctrl, *rig.cpu_qp);
  stream::LayerStreamer s(*rig.ctrl, cpu, make_layers(2, rig.lba));
  Streams st;
  try {
    s.begin(0, 0, st.s_io());
    FAIL("a CPU submitter accepted a stream");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kUnsupported);
    CHECK(std::string(e.what()).find("GPU submitter") != std::string::npos);
  }
}

TEST_CASE("GPU expert fetcher: routing in GPU memory, LRU placement identical to the CPU fetcher, bytes checked",
          "[gpu][fetch]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=64M,threads=4", 2, 256, true, {}, false);
  const uint64_t seed = 33;
  rig.write_pattern(0, 40ull << 20, seed);
  std::vector<uint64_t> ns_off;
  const uint32_t n_layers = 3, n_experts = 16, k = 8, distinct = 4;
  const stream::ExpertCatalog catalog = make_catalog(n_layers, n_experts, rig.lba, &ns_off);
  DeviceBlob d_ns(ns_off.data(), ns_off.size() * 8);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1);
  // The CPU fetcher, the reference for placement and metrics, on a queue of its own.
  auto cpu_qp = rig.ctrl->create_io_queue_pair(uint16_t(2 + rig.raw.size()), 64);
  stream::CpuSubmitter cpu(*rig.ctrl, *cpu_qp);
  const bool cached = GENERATE(true, false);
  INFO((cached ? "with" : "without") << " a cache");
  stream::FetcherOptions o;
  o.max_experts_per_fetch = distinct;
  o.cache_bytes = cached ? 10 * ((3 * (100 << 10)) + 3 * 4096) : 0;  // about 9 experts: a tight budget
  stream::GpuExpertFetcher gf(*rig.ctrl, gpu, catalog, o);
  stream::ExpertFetcher cf(*rig.ctrl, cpu, catalog, o);
  REQUIRE(gf.expert_slot_bytes() == cf.expert_slot_bytes());
  REQUIRE(gf.cache_capacity() == cf.cache_capacity());
  Streams st;
  DeviceZeros<uint32_t> ids(k);
  const uint32_t tokens = 30;
  DeviceZeros<uint64_t> bad(tokens);
  for (uint32_t t = 0; t < tokens; ++t) {
    const uint32_t layer = t % n_layers;
    test::enqueue_toy_router(st.s_compute(), ids.p, k, t, n_experts, distinct);
    gf.fetch(layer, ids.p, k, st.s_compute());
    test::enqueue_verify_fetch(st.s_compute(), gf, d_ns.as<uint64_t>(), layer, n_experts, seed, bad.p + t);
    const std::vector<stream::FetchedExpert> g = gf.wait();
    std::vector<uint32_t> chosen(k);
    for (uint32_t i = 0; i < k; ++i) chosen[i] = test::toy_route(t, i, n_experts, distinct);
    const std::vector<stream::FetchedExpert>& c = cf.fetch(layer, chosen);
    cf.wait_all();
    INFO("token " << t);
    REQUIRE(g.size() == c.size());
    for (size_t i = 0; i < g.size(); ++i) {
      CHECK(g[i].expert == c[i].expert);
      CHECK(g[i].hit == c[i].hit);
      // Cache slots are the same; without a cache the GPU packs experts by their own sizes
      // (cumulative offsets), the CPU fetcher at multiples of the largest expert.
      if (cached) CHECK(g[i].offset == c[i].offset);
      if (!cached && i > 0) CHECK(g[i].offset == g[i - 1].offset + g[i - 1].bytes);
      REQUIRE(g[i].parts.size() == c[i].parts.size());
      for (size_t p = 0; p < g[i].parts.size(); ++p) {
        CHECK(g[i].parts[p].offset - g[i].offset == c[i].parts[p].offset - c[i].offset);
        CHECK(g[i].parts[p].bytes == c[i].parts[p].bytes);
        CHECK(g[i].parts[p].proj == c[i].parts[p].proj);
      }
    }
  }
  const std::vector<uint64_t> mism = bad.get();
  for (uint32_t t = 0; t < tokens; ++t) CHECK(mism[t] == 0);
  const stream::FetcherMetrics gm = gf.metrics(), cm = cf.metrics();
  CHECK(gm.tokens == cm.tokens);
  CHECK(gm.requested == cm.requested);
  CHECK(gm.faults == cm.faults);
  CHECK(gm.hits == cm.hits);
  CHECK(gm.bytes_read == cm.bytes_read);
  CHECK(gm.steady_tokens == cm.steady_tokens);
  CHECK(gm.steady_faults == cm.steady_faults);
  CHECK(gf.resident_per_layer() == cf.resident_per_layer());
  if (cached) CHECK(gm.hits > 0);

  SECTION("back to back: no host round trip between router, fetch and consumer for 40 tokens") {
    DeviceZeros<uint64_t> bad2(1);
    for (uint32_t t = 0; t < 40; ++t) {
      const uint32_t layer = (t * 7) % n_layers;
      test::enqueue_toy_router(st.s_compute(), ids.p, k, 1000 + t, n_experts, distinct);
      gf.fetch(layer, ids.p, k, st.s_compute());
      test::enqueue_verify_fetch(st.s_compute(), gf, d_ns.as<uint64_t>(), layer, n_experts, seed, bad2.p);
    }
    gf.wait();
    CHECK(bad2.get()[0] == 0);
    CHECK(gf.metrics().tokens == tokens + 40);
  }
  SECTION("a routing id that is not an expert is refused, nothing is read") {
    const std::vector<uint32_t> wrong = {1, 99};
    DeviceBlob d_wrong(wrong.data(), wrong.size() * 4);
    const uint64_t before = gf.metrics().bytes_read;
    gf.fetch(0, d_wrong.as<uint32_t>(), 2, st.s_compute());
    try {
      gf.wait();
      FAIL("a bad routing id was accepted");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kInvalidArgument);
      CHECK(std::string(e.what()).find("99") != std::string::npos);
    }
    CHECK(gf.metrics().bytes_read == before);
  }
}

TEST_CASE("GPU layer streamer: sync() before wait() leaves the load ready in its slot", "[gpu][stream]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=64M,threads=2", 2, 128, true, {}, false);
  const uint64_t seed = 8;
  rig.write_pattern(0, 48ull << 20, seed);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1);
  stream::LayerStreamer s(*rig.ctrl, gpu, make_layers(3, rig.lba), {.slots = 2});
  Streams st;
  s.begin(2, 1, st.s_io());
  s.sync();  // the reads ended; nobody waited for them yet
  CHECK(s.ready(1));
  const stream::SlotView v = s.wait(1, st.s_compute());
  const std::vector<VerifySpan> p = pieces_of(v, rig.lba);
  DeviceBlob d(p.data(), p.size() * sizeof(VerifySpan));
  DeviceZeros<uint64_t> bad(1);
  DeviceZeros<uint32_t> seen(1);
  test::enqueue_verify_slot(st.s_compute(), static_cast<const uint8_t*>(v.device), d.as<VerifySpan>(), uint32_t(p.size()),
                            seed, 0, v.status, bad.p, seen.p);
  s.release(1, st.s_compute());
  s.sync();
  CHECK(bad.get()[0] == 0);
  CHECK(seen.get()[0] == stream::ticket_state::kOk);
  CHECK(s.stats().layers == 1);
}

TEST_CASE("GPU expert fetcher: the place kernel decides exactly as the ExpertCachePolicy object", "[gpu][fetch][policy]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=64M,threads=2", 1, 256, true, {}, false);
  std::vector<uint64_t> ns_off;
  const uint32_t n_layers = 3, n_experts = 16, distinct = 4;
  const stream::ExpertCatalog catalog = make_catalog(n_layers, n_experts, rig.lba, &ns_off);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1);
  stream::FetcherOptions o;
  o.max_experts_per_fetch = distinct;
  o.cache_bytes = 7 * ((3 * (100 << 10)) + 3 * 4096);  // a few slots: evictions every token
  stream::GpuExpertFetcher gf(*rig.ctrl, gpu, catalog, o);
  REQUIRE(gf.cache_capacity() >= distinct);
  stream::ExpertCachePolicy policy(gf.cache_capacity(), uint64_t(n_layers) * n_experts);
  Streams st;
  std::mt19937 rng(11);
  for (uint32_t t = 0; t < 200; ++t) {
    const uint32_t layer = rng() % n_layers;
    // 1..8 ids with repeats, skewed towards a few experts, so hits, faults and evictions all happen.
    std::vector<uint32_t> ids(1 + rng() % 8);
    for (uint32_t& id : ids) id = rng() % 3 == 0 ? rng() % n_experts : rng() % 5;
    std::vector<uint64_t> keys;
    for (uint32_t id : ids) {
      const uint64_t k = uint64_t(layer) * n_experts + id;
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
    if (keys.size() > distinct) {
      keys.resize(distinct);
      std::vector<uint32_t> kept;
      for (uint32_t id : ids)
        if (std::find(keys.begin(), keys.end(), uint64_t(layer) * n_experts + id) != keys.end()) kept.push_back(id);
      ids = kept;
    }
    DeviceBlob d_ids(ids.data(), ids.size() * sizeof(uint32_t));
    gf.fetch(layer, d_ids.as<uint32_t>(), uint32_t(ids.size()), st.s_compute());
    const std::vector<stream::FetchedExpert> g = gf.wait();
    const std::vector<stream::CachePlacement> want = policy.choose(keys);
    policy.commit(keys, want);
    INFO("token " << t << ", layer " << layer);
    REQUIRE(g.size() == keys.size());
    for (size_t i = 0; i < g.size(); ++i) {
      CHECK(uint64_t(layer) * n_experts + g[i].expert == keys[i]);
      CHECK(g[i].hit == want[i].hit);
      CHECK(g[i].offset == uint64_t(want[i].slot) * gf.expert_slot_bytes());
    }
  }
  const std::vector<int32_t>& where = policy.where();
  std::vector<uint32_t> per_layer(n_layers, 0);
  for (size_t k = 0; k < where.size(); ++k) per_layer[k / n_experts] += where[k] >= 0;
  CHECK(gf.resident_per_layer() == per_layer);
}
