// The engine's NVMe tier on a striped set (runtime/model/stripe.h) on the GPU: every layer streamed
// by GPU-issued reads from 2 and 4 emulated controllers at once (one GPU submitter and I/O stream per
// member, runtime/stream/striped_submitter.h) gives logits equal to the bit to the same model streamed
// from one namespace, over several tokens (every slot refilled across token boundaries), and reads
// the same bytes. Models from the generator, deployed as llm_make_model does. MoE: the routed experts
// fetched from 2 and 3 members at once (the GPU expert fetcher over a striped set: one pump and stream
// per member), with and without a cache and pre-gating, give the one-namespace logits to the bit; the
// fetcher alone reads into its scratchpad exactly the logical volume's bytes.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include <random>

#include "examples/llm/engine/executor.h"
#include "gpu_rig.h"
#include "runtime/io/cpu_block_io.h"
#include "runtime/model/stripe.h"
#include "runtime/stream/gpu_expert_fetcher.h"
#include "runtime/stream/gpu_submitter.h"
#include "runtime/stream/layer_streamer.h"
#include "stream_check.h"
#include "stream_fixtures.h"
#include "tests/llm/striped_fixture.h"

using namespace gpunvme;

namespace {

using striped_test::Images;

// A 3-layer model of its own shape (streamed layers large enough to span several stripe units).
void write_model(const std::vector<std::string>& devices, uint64_t unit) {
  striped_test::write_model(devices, unit, llm::gen::Shape{"striped-test", 3, 256, 4, 2, 512, 512, 512, 0, 0, 10000.0f}, 5);
}

// The MoE model of the fetched-expert cases (llm_fixtures.h's: 3 layers, 8 experts of which 2 routed).
void write_moe_model(const std::vector<std::string>& devices, uint64_t unit) {
  striped_test::write_model(devices, unit, llm::gen::Shape{"striped-moe", 3, 256, 4, 2, 512, 512, 512, 8, 2, 10000.0f}, 5);
}

// Six greedy steps' logits from token 3 under `o`.
std::vector<float> run_with(const std::vector<std::string>& devices, const llm::GpuExecOptions& o, llm::ExecStats* stats) {
  llm::DeviceSet set(devices);
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  REQUIRE(m.stripe.has_value() == (devices.size() > 1));
  const std::vector<host::Controller*> ctrls = set.controllers();
  auto ex = llm::make_gpu_executor(ctrls, m, 8, o);
  std::vector<float> all;
  uint32_t tok = 3;
  for (uint32_t pos = 0; pos < 6; ++pos) {
    const std::span<const float> logits = ex->step(tok, pos);
    all.insert(all.end(), logits.begin(), logits.end());
    tok = uint32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  ex->finish();
  *stats = ex->stats();
  return all;
}

// Six greedy steps' logits from token 3, every layer streamed through `slots` slots.
std::vector<float> run(const std::vector<std::string>& devices, uint32_t slots, llm::ExecStats* stats) {
  llm::GpuExecOptions o;
  o.resident_layers = 0;  // every layer streamed, every token
  o.slots = slots;
  return run_with(devices, o, stats);
}

// The options of the MoE cases: every layer's experts fetched (a VRAM budget of the dense parts only,
// or every layer streamed), with and without an expert cache, pre-gating and the one-token-lag prefetch.
struct MoeCase {
  const char* name;
  llm::GpuExecOptions o;
  bool exact_counts;  // the fetches' hits and faults do not depend on timing (no pre-gating cut)
};
std::vector<MoeCase> moe_cases(uint64_t dense, uint64_t all_experts) {
  std::vector<MoeCase> v;
  llm::GpuExecOptions base;
  base.vram_budget = dense;
  base.ram_budget = 0;
  llm::GpuExecOptions o = base;
  o.expert_pregate = 0;
  v.push_back({"no cache, no pre-gating", o, true});
  o.expert_cache_bytes = all_experts / 2;
  o.expert_prefetch = false;
  v.push_back({"a cache of half the experts", o, true});
  o.expert_prefetch = true;
  v.push_back({"a cache and the one-token-lag prefetch", o, true});
  o = base;
  o.expert_pregate = 2;
  v.push_back({"pre-gating 2, no cache", o, false});
  o = base;
  o.expert_cache_bytes = 64ull << 20;  // the default pre-gating (1) beside a cache
  v.push_back({"pre-gating by default, a cache", o, false});
  o = llm::GpuExecOptions{};
  o.resident_layers = 0;  // every dense part streamed too: the streamer's and the fetcher's queues on every member
  o.expert_overlap = false;
  v.push_back({"every layer streamed, experts fetched, no overlap", o, false});
  return v;
}

}  // namespace

TEST_CASE("llm striped MoE: experts fetched from 2 and 3 members give the one-namespace logits, to the bit", "[stripe][fetch]") {
  REQUIRE_GPU();
  Images img;
  write_moe_model(img.devices("moe-one", 1, ",size=32M"), 0);
  uint64_t dense = 0, all_experts = 0, kv = 0;
  {
    llm::DeviceSet set(img.devices("moe-one", 1));
    const llm::ModelOnDevice m = llm::open_model(set.namespaces());
    for (const llm::LayerBytes& b : llm::layer_bytes(m)) dense += b.dense, all_experts += b.experts;
    kv = llm::kv_cache_bytes(m.config, llm::KvCacheShape{}, 8);
  }
  // The dense parts in VRAM beside the KV cache (its 8 positions, llm_fixtures.h's run()).
  const std::vector<MoeCase> cases = moe_cases(dense + kv, all_experts);
  std::vector<std::vector<float>> one(cases.size());
  std::vector<llm::ExecStats> one_stats(cases.size());
  for (size_t c = 0; c < cases.size(); ++c) {
    one[c] = run_with(img.devices("moe-one", 1), cases[c].o, &one_stats[c]);
    REQUIRE(one_stats[c].has_experts);
  }
  // 2 members with 4 KiB units (every part cut many times), 3 with 64 KiB (parts of a few pieces).
  for (const auto& [n, unit] : {std::pair<uint32_t, uint64_t>{2, 4096}, std::pair<uint32_t, uint64_t>{3, 64 * 1024}}) {
    const std::string prefix = "moe" + std::to_string(n) + "u" + std::to_string(unit) + "-";
    write_moe_model(img.devices(prefix, n, ",size=16M"), unit);
    for (size_t c = 0; c < cases.size(); ++c) {
      INFO(n << " members, unit " << unit << ": " << cases[c].name);
      llm::ExecStats st;
      const std::vector<float> got = run_with(img.devices(prefix, n), cases[c].o, &st);
      REQUIRE(got.size() == one[c].size());
      CHECK(std::memcmp(got.data(), one[c].data(), got.size() * sizeof(float)) == 0);
      CHECK(st.has_experts);
      CHECK(st.experts.tokens == one_stats[c].experts.tokens);
      CHECK(st.experts.requested == one_stats[c].experts.requested);
      CHECK(st.expert_pregate == one_stats[c].expert_pregate);
      CHECK(st.expert_prefetch == one_stats[c].expert_prefetch);
      CHECK(st.prefetch.prefetches == one_stats[c].prefetch.prefetches);
      if (cases[c].exact_counts) {
        CHECK(st.experts.hits == one_stats[c].experts.hits);
        CHECK(st.experts.faults == one_stats[c].experts.faults);
        CHECK(st.experts.bytes_read == one_stats[c].experts.bytes_read);
      }
    }
  }
}

// The fetcher alone over 2 and 3 emulated members (one GPU submitter per member, and one more per
// member for concurrent prefetches), against the same fetcher over one namespace holding the logical
// volume's bytes: the same decisions token by token, and every fetched part's bytes in the scratchpad
// equal to the logical volume's (written through the set's logical BlockIo), parts at odd byte offsets
// crossing stripe units.
TEST_CASE("striped expert fetcher on the GPU: every member's reads land in the scratchpad where one drive's would",
          "[stripe][fetch]") {
  REQUIRE_GPU();
  constexpr uint32_t kLba = 512, kLayers = 2, kExperts = 8, kIds = 6, kDistinct = 3;
  for (const uint32_t n : {2u, 3u})
    for (const uint32_t mode : {0u, 1u, 2u}) {  // no cache; a cache; a cache with concurrent prefetches
      INFO(n << " members, mode " << mode);
      std::vector<std::unique_ptr<test::GpuRig>> rigs;
      std::vector<model::BlockIo> ios;
      for (uint32_t i = 0; i < n; ++i) {
        rigs.push_back(std::make_unique<test::GpuRig>("emu:ram,size=16M,lba=512", 4, 64, true, device::DeviceQueueOptions{}, false));
        ios.push_back(model::cpu_block_io(*rigs[i]->ctrl, *rigs[i]->cpu, "member " + std::to_string(i)));
      }
      const model::StripeGeometry g = model::make_stripe_geometry(n, kLba, rigs[0]->ctrl->namespace_info(1).blocks, 8192, 5);
      model::write_stripe_records(ios, g, {1, 5});
      const model::StripeSet set(ios);
      test::GpuRig one("emu:ram,size=16M,lba=512", 4, 64, true, device::DeviceQueueOptions{}, false);
      const model::BlockIo one_io = model::cpu_block_io(*one.ctrl, *one.cpu, "one");
      std::vector<uint8_t> data(6u << 20);
      std::mt19937 rng(7 + n);
      for (auto& b : data) b = uint8_t(rng());
      set.logical().write(0, uint32_t(data.size() / kLba), data.data());
      one_io.write(0, uint32_t(data.size() / kLba), data.data());
      std::vector<uint64_t> ns_off;
      const stream::ExpertCatalog catalog = test::make_catalog(kLayers, kExperts, kLba, &ns_off, 90 << 10);
      stream::FetcherOptions o;
      o.max_experts_per_fetch = kDistinct;
      o.cache_bytes = mode == 0 ? 0 : 7 * (3 * (100 << 10) + 3 * 4096);  // about 7 experts: LRU victims
      o.max_command_bytes = 16 << 10;  // several reads per piece too
      auto half = [](const test::GpuRig& r, bool second) {
        return std::vector<host::QueuePair*>(r.raw.begin() + (second ? 2 : 0), r.raw.begin() + (second ? 4 : 2));
      };
      std::vector<std::unique_ptr<stream::GpuSubmitter>> subs;
      std::vector<stream::GpuFetcherMember> members;
      for (uint32_t i = 0; i < n; ++i) {
        subs.push_back(std::make_unique<stream::GpuSubmitter>(*rigs[i]->ctrl, half(*rigs[i], false), 1));
        stream::GpuSubmitter* pf = nullptr;
        if (mode == 2) {
          subs.push_back(std::make_unique<stream::GpuSubmitter>(*rigs[i]->ctrl, half(*rigs[i], true), 1));
          pf = subs.back().get();
        }
        members.push_back({rigs[i]->ctrl.get(), subs[subs.size() - (pf ? 2 : 1)].get(), pf});
      }
      stream::GpuSubmitter one_sub(*one.ctrl, half(one, false), 1);
      std::unique_ptr<stream::GpuSubmitter> one_pf;
      if (mode == 2) one_pf = std::make_unique<stream::GpuSubmitter>(*one.ctrl, half(one, true), 1);
      {
        stream::GpuExpertFetcher sf(members, &g, catalog, o);
        stream::GpuExpertFetcher of(*one.ctrl, one_sub, catalog, o, one_pf.get());
        CHECK(sf.members() == n);
        REQUIRE(sf.expert_slot_bytes() == of.expert_slot_bytes());
        REQUIRE(sf.cache_capacity() == of.cache_capacity());
        test::Streams st;
        test::DeviceZeros<uint32_t> ids(kIds);
        for (uint32_t t = 0; t < 24; ++t) {
          const uint32_t layer = t % kLayers;
          INFO("token " << t);
          test::enqueue_toy_router(st.s_compute(), ids.p, kIds, t, kExperts, kDistinct);
          if (mode == 2 && t % 3 == 1) {  // a concurrent prefetch of this layer's experts of another token first
            test::enqueue_toy_router(st.s_compute(), ids.p, kIds, t + 100, kExperts, kDistinct);
            REQUIRE(cudaStreamSynchronize(st.compute) == cudaSuccess);
            sf.prefetch(layer, ids.p, kIds, st.s_io());
            of.prefetch(layer, ids.p, kIds, st.s_io());
            REQUIRE(cudaStreamSynchronize(st.io) == cudaSuccess);  // the prefetches placed before the router is rerun
            test::enqueue_toy_router(st.s_compute(), ids.p, kIds, t, kExperts, kDistinct);
          }
          sf.fetch(layer, ids.p, kIds, st.s_compute());
          of.fetch(layer, ids.p, kIds, st.s_compute());
          const std::vector<stream::FetchedExpert> a = sf.wait(), b = of.wait();
          REQUIRE(a.size() == b.size());
          const uint8_t* pad = sf.scratchpad().as<uint8_t>();
          for (size_t i = 0; i < a.size(); ++i) {
            CHECK(a[i].expert == b[i].expert);
            CHECK(a[i].hit == b[i].hit);
            CHECK(a[i].offset == b[i].offset);
            const auto& parts = catalog.of(layer, a[i].expert);
            REQUIRE(a[i].parts.size() == parts.size());
            for (size_t k = 0; k < parts.size(); ++k) {
              const model::Extent& e = parts[k].extent;
              REQUIRE(a[i].parts[k].bytes == e.byte_length);
              CHECK(std::memcmp(pad + a[i].parts[k].offset, data.data() + e.first_lba * kLba + e.byte_in_first, e.byte_length) == 0);
            }
          }
        }
        const stream::FetcherMetrics sm = sf.metrics(), om = of.metrics();
        CHECK(sm.faults == om.faults);
        CHECK(sm.hits == om.hits);
        CHECK(sm.bytes_read == om.bytes_read);
        if (mode > 0) CHECK(sm.hits > 0);
        CHECK(sf.recovery().retries == 0);
        if (mode == 2) CHECK(sf.prefetch_metrics().prefetches == 8);
      }
    }
  // Members that are not the set's: refused, naming what.
  {
    std::vector<std::unique_ptr<test::GpuRig>> rigs;
    for (uint32_t i = 0; i < 2; ++i)
      rigs.push_back(std::make_unique<test::GpuRig>("emu:ram,size=16M,lba=512", 2, 64, true, device::DeviceQueueOptions{}, false));
    const model::StripeGeometry g3 = model::make_stripe_geometry(3, kLba, rigs[0]->ctrl->namespace_info(1).blocks, 8192, 5);
    stream::GpuSubmitter a(*rigs[0]->ctrl, rigs[0]->raw, 1), b(*rigs[1]->ctrl, rigs[1]->raw, 1);
    const std::vector<stream::GpuFetcherMember> two = {{rigs[0]->ctrl.get(), &a, nullptr}, {rigs[1]->ctrl.get(), &b, nullptr}};
    std::vector<uint64_t> ns_off;
    const stream::ExpertCatalog catalog = test::make_catalog(1, 4, kLba, &ns_off, 32 << 10);
    CHECK_THROWS_WITH(stream::GpuExpertFetcher(two, &g3, catalog, {}), Catch::Matchers::ContainsSubstring("2 members for a striped set of 3"));
    const std::vector<stream::GpuFetcherMember> some_pf = {{rigs[0]->ctrl.get(), &a, &b}, {rigs[1]->ctrl.get(), &b, nullptr}};
    const model::StripeGeometry g2 = model::make_stripe_geometry(2, kLba, rigs[0]->ctrl->namespace_info(1).blocks, 8192, 5);
    CHECK_THROWS_WITH(stream::GpuExpertFetcher(some_pf, &g2, catalog, {}), Catch::Matchers::ContainsSubstring("some members"));
  }
}

TEST_CASE("llm striped: 2 and 4 members streamed by the GPU give the one-namespace logits, to the bit", "[stripe]") {
  REQUIRE_GPU();
  Images img;
  write_model(img.devices("one", 1, ",size=32M"), 0);
  llm::ExecStats one_stats;
  const std::vector<float> one = run(img.devices("one", 1), 2, &one_stats);
  REQUIRE(one_stats.streamed_layers == 3);
  for (const uint32_t n : {2u, 4u})
    for (const uint64_t unit : {uint64_t(4096), uint64_t(64 * 1024)})
      for (const uint32_t slots : {1u, 2u, 3u}) {
        INFO(n << " members, unit " << unit << ", " << slots << " slots");
        const std::string prefix = "s" + std::to_string(n) + "u" + std::to_string(unit) + "-";
        if (slots == 1) write_model(img.devices(prefix, n, ",size=16M"), unit);
        llm::ExecStats st;
        const std::vector<float> got = run(img.devices(prefix, n), slots, &st);
        REQUIRE(got.size() == one.size());
        CHECK(std::memcmp(got.data(), one.data(), one.size() * sizeof(float)) == 0);
        CHECK(st.streamed_layers == 3);
        CHECK(st.bytes_per_step == one_stats.bytes_per_step);
        CHECK(st.streamed_bytes >= st.bytes_per_step * 6);
      }
}

// The streamer alone, GPU-ordered, on 3 members: one GPU submitter and stream per member, extents at
// odd byte offsets crossing stripe units, two slots refilled in turn; every piece's bytes checked.
TEST_CASE("striped streamer on the GPU: every member's reads land in the slot where one drive's would", "[stripe]") {
  REQUIRE_GPU();
  constexpr uint32_t kMembers = 3, kLba = 512, kLayers = 5;
  std::vector<std::unique_ptr<test::GpuRig>> rigs;
  std::vector<model::BlockIo> ios;
  for (uint32_t i = 0; i < kMembers; ++i) {
    rigs.push_back(std::make_unique<test::GpuRig>("emu:ram,size=16M,lba=512", 2, 64, true, device::DeviceQueueOptions{}, false));
    ios.push_back(model::cpu_block_io(*rigs[i]->ctrl, *rigs[i]->cpu, "member " + std::to_string(i)));
  }
  model::write_stripe_records(ios, model::make_stripe_geometry(kMembers, kLba, rigs[0]->ctrl->namespace_info(1).blocks, 8192, 5), {1, 5});
  const model::StripeSet set(ios);
  std::vector<uint8_t> data(4u << 20);
  std::mt19937 rng(3);
  for (auto& b : data) b = uint8_t(rng());
  set.logical().write(0, uint32_t(data.size() / kLba), data.data());
  std::vector<std::vector<model::Extent>> layers;
  for (uint64_t l = 0; l < kLayers; ++l)
    layers.push_back({model::byte_range_to_extent(l * 700000 + 13, 300001, kLba, 0),
                      model::byte_range_to_extent(l * 700000 + 400007, 123457, kLba, 0)});
  std::vector<std::unique_ptr<stream::GpuSubmitter>> subs;
  std::vector<cudaStream_t> streams(kMembers + 1, nullptr);  // [0]: io and member 0, [k]: member k, [kMembers]: compute
  for (auto& st : streams) REQUIRE(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess);
  std::vector<stream::StripedMember> members;
  for (uint32_t i = 0; i < kMembers; ++i) {
    subs.push_back(std::make_unique<stream::GpuSubmitter>(*rigs[i]->ctrl, rigs[i]->raw, 1));
    members.push_back({rigs[i]->ctrl.get(), subs.back().get(), i ? reinterpret_cast<stream::cuda_stream_t>(streams[i]) : nullptr});
  }
  auto cs = [](cudaStream_t s) { return reinterpret_cast<stream::cuda_stream_t>(s); };
  const cudaStream_t io = streams[0], compute = streams[kMembers];
  {
    stream::LayerStreamer s(members, set.geometry(), layers, {.slots = 2});
    std::vector<uint8_t> got(s.slot_bytes());
    for (uint32_t round = 0; round < 2; ++round) {
      s.begin(0, 0, cs(io));
      for (uint32_t l = 0; l < kLayers; ++l) {
        if (l + 1 < kLayers) s.begin(l + 1, (l + 1) % 2, cs(io));
        const stream::SlotView v = s.wait(l % 2, cs(compute));
        REQUIRE(v.device != nullptr);
        REQUIRE(cudaMemcpyAsync(got.data(), v.device, v.bytes, cudaMemcpyDefault, compute) == cudaSuccess);
        REQUIRE(cudaStreamSynchronize(compute) == cudaSuccess);
        INFO("round " << round << " layer " << l);
        for (const plan::Piece& p : v.plan->pieces) {
          const uint64_t at = p.source.first_lba * kLba + p.source.byte_in_first;
          CHECK(std::memcmp(got.data() + p.data_offset, data.data() + at, p.source.byte_length) == 0);
        }
        s.release(l % 2, cs(compute));
      }
      s.sync();
    }
    CHECK(s.stats().layers == 2 * kLayers);
  }
  subs.clear();
  for (auto& st : streams) cudaStreamDestroy(st);
}
