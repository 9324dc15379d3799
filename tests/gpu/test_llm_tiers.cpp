// The engine's tiers on the GPU (examples/llm): the RAM tier's per-token copies hold the model's bytes
// in every round of its ring, and a plan mixing VRAM, RAM and NVMe layers (and, for MoE, fetched
// experts with a cache, with and without the one-token-lag prefetch) gives logits equal to the bit to
// every layer in VRAM. So does the bench's ntransformer-style loader as the NVMe tier, with its pages
// kept mapped or evicted. Models come from the
// generator (examples/llm/tools), deployed onto an emulated namespace in a temporary image.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bench/llm_tokens_mmap.h"
#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/ram_tier.h"
#include "examples/llm/tools/generated_model.h"
#include "gpu_rig.h"
#include "llm_fixtures.h"
#include "host/emulator/controller.h"
#include "host/emulator/fault_spec.h"
#include "host/error.h"
#include "host/open_device.h"
#include "runtime/deploy/deploy.h"

using namespace gpunvme;

namespace {

using test::DeployedModel;  // llm_fixtures.h: the 3-layer model, opened, six steps
using test::Opened;
using test::run;

}  // namespace

TEST_CASE("llm RAM tier: every round of the ring holds the layer's bytes") {
  REQUIRE_GPU();
  DeployedModel d(0);
  Opened o(d.device);
  std::vector<llm::PackedRanges> layers;
  for (const llm::LayerWeights& l : o.m.weights.layers) layers.push_back(llm::dense_part(o.m, l));
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  {
    llm::RamTier tier(o.m, layers, 2);  // 3 layers through 2 buffers: each buffer holds every layer in turn
    for (uint32_t n = 0; n < 7; ++n) {
      const llm::PackedRanges& r = layers[n % layers.size()];
      const llm::WeightView v = tier.acquire(s);
      for (const llm::PackedRanges::Piece& q : r.pieces) {
        std::vector<uint8_t> got(q.end - q.begin), want(q.end - q.begin);
        REQUIRE(cudaMemcpyAsync(got.data(), v.base + v.held->offset(q.begin, got.size()), got.size(), cudaMemcpyDeviceToHost, s) == cudaSuccess);
        REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
        llm::read_model_bytes(o.m, q.begin, want.size(), want.data());
        INFO("round " << n << ", piece at " << q.begin);
        REQUIRE(got == want);
      }
      tier.release(s);
    }
    tier.sync();
  }
  cudaStreamDestroy(s);
}

TEST_CASE("llm tiers: VRAM + RAM + NVMe layers give the logits of every layer in VRAM, to the bit") {
  REQUIRE_GPU();
  for (const uint32_t experts : {0u, 8u}) {
    DeployedModel d(experts);
    Opened o(d.device);
    const std::vector<llm::LayerBytes> bytes = llm::layer_bytes(o.m);
    uint64_t widest = 0, all_experts = 0;
    for (const llm::LayerBytes& b : bytes) widest = std::max(widest, b.dense), all_experts += b.experts;
    llm::GpuExecOptions all, mixed;
    all.resident_layers = o.m.config.n_layer;
    mixed.vram_budget = widest + test::run_kv_bytes(o.m);  // one layer beside the KV cache
    mixed.ram_budget = widest;
    if (experts) {
      mixed.expert_cache_bytes = all_experts / 2;  // MoE: an LRU cache of half the experts
      mixed.expert_prefetch = true;                // the one-token-lag prefetch (the default is pre-gating)
    }
    llm::ExecStats sa, sm;
    const auto want = run(*o.ctrl, o.m, all, &sa);
    const auto got = run(*o.ctrl, o.m, mixed, &sm);
    INFO("experts " << experts);
    if (experts) {
      // The prefetch ran and is accounted: every expert it read was either found by the next fetch of
      // its layer (then a cache hit there) or wasted; the fetches' stall clock ran at every layer.
      const stream::PrefetchMetrics& p = sm.prefetch;
      CHECK(sm.expert_prefetch);
      CHECK(p.prefetches == 5 * 3);  // every token after the first, at each of the 3 layers with fetched experts
      CHECK(p.hits + p.wasted == p.reads);
      CHECK(p.unsettled == 0);  // the last prefetch was followed by its layer's fetch
      CHECK(p.hits <= sm.experts.hits);
      CHECK(p.bytes_read >= p.wasted_bytes);
      REQUIRE(p.stall_seconds.size() == 3);
      for (double s : p.stall_seconds) CHECK(s > 0);
      // The same plan without it: the same logits, no prefetch counted.
      llm::GpuExecOptions off = mixed;
      off.expert_prefetch = false;
      llm::ExecStats so;
      const auto got_off = run(*o.ctrl, o.m, off, &so);
      CHECK(!so.expert_prefetch);
      CHECK(so.prefetch.prefetches == 0);
      CHECK(so.experts.tokens == sm.experts.tokens);
      REQUIRE(got_off.size() == want.size());
      for (size_t i = 0; i < got_off.size(); ++i) {
        INFO("prefetch off, step " << i);
        CHECK(std::memcmp(got_off[i].data(), want[i].data(), got_off[i].size() * sizeof(float)) == 0);
      }
      // The expert kernels overlapped with the reads (the default where the driver has stream memory
      // waits, as on the GPUs this suite runs on) and not: the same logits. Without a cache every
      // fetch packs its experts over the bytes the previous layer's kernels read.
      CHECK(sm.expert_overlap);
      for (const bool overlap : {false, true}) {
        llm::GpuExecOptions ov = mixed;
        ov.expert_overlap = overlap;
        if (overlap) {
          ov.expert_cache_bytes = 0;
          ov.expert_prefetch = false;
        }
        llm::ExecStats sv;
        const auto got_ov = run(*o.ctrl, o.m, ov, &sv);
        CHECK(sv.expert_overlap == overlap);
        REQUIRE(got_ov.size() == want.size());
        for (size_t i = 0; i < got_ov.size(); ++i) {
          INFO("overlap " << overlap << ", step " << i);
          CHECK(std::memcmp(got_ov[i].data(), want[i].data(), got_ov[i].size() * sizeof(float)) == 0);
        }
      }
      // A cache of 3 experts holds one fetch (k = 2) but not a prefetch next to it: asking for the
      // prefetch is an error naming the fix (slots are page rounded: 3 x (expert + 3 pages) still gives 3).
      llm::GpuExecOptions tiny = mixed;
      tiny.expert_cache_bytes = 3 * (all_experts / (3 * experts) + 3 * 4096);
      tiny.expert_prefetch = true;
      CHECK_THROWS_WITH(llm::make_gpu_executor(*o.ctrl, o.m, 8, tiny), Catch::Matchers::ContainsSubstring("--expert-prefetch off"));
      tiny.expert_prefetch.reset();  // the default: pre-gating (with two fetches of slots added), the logits as before
      llm::ExecStats st;
      const auto got_tiny = run(*o.ctrl, o.m, tiny, &st);
      CHECK(!st.expert_prefetch);
      CHECK(st.expert_pregate == 1);
      for (size_t i = 0; i < got_tiny.size(); ++i)
        CHECK(std::memcmp(got_tiny[i].data(), want[i].data(), got_tiny[i].size() * sizeof(float)) == 0);
    }
    CHECK(sa.resident_layers == 3);
    CHECK(sm.resident_layers == 1);
    CHECK(sm.ram_layers == 1);
    CHECK(sm.streamed_layers == 1);
    CHECK(sm.has_experts == (experts > 0));
    if (experts) CHECK(sm.experts.requested > 0);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("step " << i);
      REQUIRE(got[i].size() == want[i].size());
      CHECK(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)) == 0);
    }
  }
}

// Pre-gating (GpuForward::pregate): every dense part in VRAM, every layer's experts fetched with no
// cache in the budget. At layers 0 and 1 the next layer's router runs on the current state and its
// predicted experts are read ahead into the two fetches of slots the fetcher then gets; at layer 2
// (the last) the next pass's layer 0 is predicted by this pass's routing there (expert_pregate_first,
// by default as many). Wrong predictions are cut when the fetch is placed. The logits stay those of
// every layer in VRAM, every prediction read is settled as a hit or waste (but the last one, which
// no fetch followed), and the requests it cannot serve are refused naming the fix.
TEST_CASE("llm tiers: pre-gated expert reads ahead of routing keep the logits and are all accounted") {
  REQUIRE_GPU();
  DeployedModel d(8);
  Opened o(d.device);
  const uint64_t dense = test::dense_bytes(o.m);
  llm::GpuExecOptions all, pre;
  all.resident_layers = o.m.config.n_layer;
  pre.vram_budget = dense + test::run_kv_bytes(o.m);  // no room for a whole layer's experts: all three layers fetch theirs
  pre.ram_budget = 0;
  pre.expert_pregate = 2;
  llm::ExecStats sa, sp;
  const auto want = run(*o.ctrl, o.m, all, &sa);
  const auto got = run(*o.ctrl, o.m, pre, &sp);
  CHECK(sp.resident_layers == 3);
  CHECK(sp.has_experts);
  CHECK(sp.plan.expert_cache_bytes == 0);
  CHECK(sp.expert_pregate == 2);
  CHECK(!sp.expert_prefetch);
  const stream::PrefetchMetrics& p = sp.prefetch;
  CHECK(sp.expert_pregate_first == 2);  // the default: pre-gating's count
  CHECK(p.prefetches == 6 * 3);  // every token, at layers 0 and 1 (the next layer) and 2 (the next pass's layer 0)
  CHECK(p.reads > 0);
  CHECK(p.unsettled <= 2);  // the last prediction's reads: no fetch followed it
  CHECK(p.hits + p.wasted + p.unsettled == p.reads);
  CHECK(p.cut <= p.wasted);
  CHECK(p.hits <= sp.experts.hits);
  CHECK(sp.experts.tokens == 6 * 3);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("step " << i);
    CHECK(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)) == 0);
  }
  // Off: the same fetches, nothing read ahead.
  llm::GpuExecOptions off = pre;
  off.expert_pregate = 0;
  llm::ExecStats so;
  const auto got_off = run(*o.ctrl, o.m, off, &so);
  CHECK(so.expert_pregate == 0);
  CHECK(so.prefetch.prefetches == 0);
  for (size_t i = 0; i < got_off.size(); ++i) CHECK(std::memcmp(got_off[i].data(), want[i].data(), got_off[i].size() * sizeof(float)) == 0);
  // The default with no expert cache: pre-gating of max(1, k / 2) = 1 expert, the same logits.
  llm::GpuExecOptions dflt = pre;
  dflt.expert_pregate.reset();
  llm::ExecStats sd;
  const auto got_dflt = run(*o.ctrl, o.m, dflt, &sd);
  CHECK(sd.expert_pregate == 1);
  CHECK(sd.expert_pregate_first == 1);
  CHECK(sd.prefetch.prefetches == 6 * 3);
  for (size_t i = 0; i < got_dflt.size(); ++i) CHECK(std::memcmp(got_dflt[i].data(), want[i].data(), got_dflt[i].size() * sizeof(float)) == 0);
  // The default with an expert cache too (there the one-token lag finds the previous token's experts
  // cached and reads nothing): pre-gating of 1, the same logits.
  llm::GpuExecOptions cached = dflt;
  cached.expert_cache_bytes = 64ull << 20;
  llm::ExecStats sc;
  const auto got_cached = run(*o.ctrl, o.m, cached, &sc);
  CHECK(sc.expert_pregate == 1);
  CHECK(!sc.expert_prefetch);
  CHECK(sc.prefetch.prefetches == 6 * 3);
  for (size_t i = 0; i < got_cached.size(); ++i) CHECK(std::memcmp(got_cached[i].data(), want[i].data(), got_cached[i].size() * sizeof(float)) == 0);
  // Without the next pass's layer 0: two predictions per pass, the last one (layer 2's) followed by
  // its fetch, the same logits.
  llm::GpuExecOptions first = pre;
  first.expert_pregate_first = 0;
  llm::ExecStats sw;
  const auto got_first = run(*o.ctrl, o.m, first, &sw);
  CHECK(sw.expert_pregate_first == 0);
  CHECK(sw.prefetch.prefetches == 6 * 2);
  CHECK(sw.prefetch.reads > 0);
  CHECK(sw.prefetch.unsettled == 0);
  CHECK(sw.prefetch.hits + sw.prefetch.wasted == sw.prefetch.reads);
  for (size_t i = 0; i < got_first.size(); ++i) CHECK(std::memcmp(got_first[i].data(), want[i].data(), got_first[i].size() * sizeof(float)) == 0);
  // A controller with no queue left for the predictions' reads (4 streamer + 4 fetcher queues from
  // qid 2: 9 granted): the default turns pre-gating off, an explicit count is refused naming the fix.
  {
    Opened few(d.device + ",queues=9");
    llm::ExecStats sf;
    const auto got_few = run(*few.ctrl, few.m, dflt, &sf);
    CHECK(sf.expert_pregate == 0);
    for (size_t i = 0; i < got_few.size(); ++i) CHECK(std::memcmp(got_few[i].data(), want[i].data(), got_few[i].size() * sizeof(float)) == 0);
    CHECK_THROWS_WITH(llm::make_gpu_executor(*few.ctrl, few.m, 8, pre), Catch::Matchers::ContainsSubstring("--expert-pregate 0"));
  }
  // More than k predicted, or both prefetches at once: refused, naming the flag.
  llm::GpuExecOptions bad = pre;
  bad.expert_pregate = 3;
  CHECK_THROWS_WITH(llm::make_gpu_executor(*o.ctrl, o.m, 8, bad), Catch::Matchers::ContainsSubstring("at most 2 can be predicted"));
  bad.expert_pregate = 1;
  bad.expert_prefetch = true;
  CHECK_THROWS_WITH(llm::make_gpu_executor(*o.ctrl, o.m, 8, bad), Catch::Matchers::ContainsSubstring("choose one"));
  // The next pass's first layer: at most k, and only beside pre-gating (its queues and slots).
  bad = pre;
  bad.expert_pregate_first = 3;
  CHECK_THROWS_WITH(llm::make_gpu_executor(*o.ctrl, o.m, 8, bad), Catch::Matchers::ContainsSubstring("--expert-pregate-first 3"));
  bad = off;
  bad.expert_pregate_first = 1;
  CHECK_THROWS_WITH(llm::make_gpu_executor(*o.ctrl, o.m, 8, bad), Catch::Matchers::ContainsSubstring("give --expert-pregate N too"));
}

// Pre-gating for passes of several tokens (GpuForward::pregate_pass): four sequences decoding together,
// every layer's experts fetched (cache of 2k = 4 slots), grouped (4 tokens: the default). At layers 0
// and 1 every token's next-layer routing is predicted in one launch and the union's best 2 read ahead
// after the layer's last fetch; at layer 2 the next pass's layer 0 from the log. Each pass's logits equal
// those of every layer in VRAM, and of the same run with GPUNVME_PREGATE_PASS=0 (no prediction for such
// passes: none read ahead at all). The token path (GPUNVME_MOE_GROUP_FETCHED=0) predicts nothing for
// such passes by default (gpu_forward.cu's moe() says why) and keeps the bits; with
// GPUNVME_PREGATE_PASS=all it predicts after the last token's fetch, and the later tokens' fetches of a
// layer meet the prediction's experts the first token's fetch cut (read again, then hit: not pending on
// the cut read, gpu_expert_place.cu): the same bits.
namespace {
struct EnvVar {
  std::string name;
  EnvVar(const char* n, const char* v) : name(n) { ::setenv(n, v, 1); }
  ~EnvVar() { ::unsetenv(name.c_str()); }
};
// Four sequences (slots 0..3), each from its own first token at position 0, then greedy: 5 passes of 4
// tokens; every pass's logits (4 rows).
std::vector<std::vector<float>> four_seqs(host::Controller& c, const llm::ModelOnDevice& m, llm::GpuExecOptions o, llm::ExecStats* st) {
  o.max_seqs = 4, o.max_batch = 4;
  auto ex = llm::make_gpu_executor(c, m, 8, o);
  std::vector<std::vector<float>> out;
  std::vector<uint32_t> tok = {3, 17, 42, 99};
  const size_t V = m.config.n_vocab;
  for (uint32_t pos = 0; pos < 5; ++pos) {
    std::vector<llm::PassToken> pass;
    for (uint32_t q = 0; q < 4; ++q) pass.push_back({tok[q], q, pos, true});
    const std::span<const float> l = ex->pass(pass);
    REQUIRE(l.size() == 4 * V);
    out.emplace_back(l.begin(), l.end());
    for (uint32_t q = 0; q < 4; ++q) tok[q] = uint32_t(std::max_element(l.begin() + q * V, l.begin() + (q + 1) * V) - (l.begin() + q * V));
  }
  ex->finish();
  *st = ex->stats();
  return out;
}
}  // namespace

TEST_CASE("llm tiers: pre-gating predicts a pass of several sequences' experts and keeps their logits", "[gpu][llm][pregate]") {
  REQUIRE_GPU();
  DeployedModel d(8);
  Opened o(d.device);
  const uint64_t dense = test::dense_bytes(o.m);
  llm::GpuExecOptions all, pre;
  all.resident_layers = o.m.config.n_layer;
  pre.vram_budget = dense + 4 * test::run_kv_bytes(o.m);  // every layer's experts fetched (the 4 slots' KV cache beside)
  pre.ram_budget = 0;
  pre.expert_pregate = 2;
  llm::ExecStats sa;
  const auto want = four_seqs(*o.ctrl, o.m, all, &sa);
  for (const char* group : {"4", "0"}) {  // grouped (the default from 4 tokens), token by token
    INFO("GPUNVME_MOE_GROUP_FETCHED " << group);
    std::optional<EnvVar> token_path;
    if (std::string(group) == "0") token_path.emplace("GPUNVME_MOE_GROUP_FETCHED", "0");
    llm::ExecStats on, off;
    const auto got = four_seqs(*o.ctrl, o.m, pre, &on);
    std::vector<std::vector<float>> got_off;
    {
      EnvVar no("GPUNVME_PREGATE_PASS", "0");
      got_off = four_seqs(*o.ctrl, o.m, pre, &off);
    }
    const bool grouped = std::string(group) != "0";
    CHECK(on.has_experts);
    CHECK(on.expert_pregate == 2);
    CHECK(on.expert_pregate_pass == 2);  // min(k, cache slots - k) = min(2, 4 - 2)
    if (grouped) {
      CHECK(on.pregate_passes == 5 * 3);  // every pass at layers 0, 1 and 2 (the next pass's layer 0)
      CHECK(on.prefetch.prefetches == 5 * 3);
      CHECK(on.prefetch.reads > 0);
      CHECK(on.prefetch.hits > 0);
      CHECK(on.prefetch.hits + on.prefetch.wasted + on.prefetch.unsettled == on.prefetch.reads);
    } else {
      CHECK(on.pregate_passes == 0);
      CHECK(on.prefetch.prefetches == 0);
      llm::ExecStats all_st;
      std::vector<std::vector<float>> got_all;
      {
        EnvVar every("GPUNVME_PREGATE_PASS", "all");
        got_all = four_seqs(*o.ctrl, o.m, pre, &all_st);
      }
      CHECK(all_st.pregate_passes == 5 * 3);
      CHECK(all_st.prefetch.prefetches == 5 * 3);
      CHECK(all_st.prefetch.hits + all_st.prefetch.wasted + all_st.prefetch.unsettled == all_st.prefetch.reads);
      REQUIRE(got_all.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        INFO("token path, GPUNVME_PREGATE_PASS=all, pass " << i);
        CHECK(std::memcmp(got_all[i].data(), want[i].data(), want[i].size() * sizeof(float)) == 0);
      }
    }
    CHECK(off.expert_pregate_pass == 0);
    CHECK(off.pregate_passes == 0);
    CHECK(off.prefetch.prefetches == 0);
    CHECK(on.experts.tokens == off.experts.tokens);  // the same fetches (pre-gating decides only what is read early)
    REQUIRE(got.size() == want.size());
    REQUIRE(got_off.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("pass " << i);
      CHECK(std::memcmp(got[i].data(), want[i].data(), want[i].size() * sizeof(float)) == 0);
      CHECK(std::memcmp(got_off[i].data(), want[i].data(), want[i].size() * sizeof(float)) == 0);
    }
  }
}

// The engine stops at a failed streamed layer (gpu_executor: LayerStreamer::throw_if_failed after
// each token's logits): every layer streams, a DNR-set read error armed through the fault grammar
// fires on a streamed layer, and step() throws the clear error (LBA range, decoded status) at that
// token, in bounded time; no later token is computed on the missing bytes, nothing hangs.
TEST_CASE("llm tiers: a DNR-set error on a streamed layer ends the generation at that token with a clear error",
          "[recovery][stream-failure]") {
  REQUIRE_GPU();
  DeployedModel d(0);
  Opened o(d.device);
  auto* emu = dynamic_cast<emu::EmulatedController*>(&o.ctrl->transport());
  REQUIRE(emu != nullptr);
  llm::GpuExecOptions all_streamed;
  all_streamed.resident_layers = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::string error;
  ErrorKind kind = ErrorKind::kIo;
  uint32_t stopped_at = 99, fired = 0;
  {
    auto ex = llm::make_gpu_executor(*o.ctrl, o.m, 8, all_streamed);
    // Armed once the executor is up: the 5th read from then on, a streamed layer's (dense model).
    const int id = emu->faults().add(emu::parse_fault_spec("error:op=read:sct=2:sc=0x81:dnr=1:nth=5"));
    uint32_t tok = 3;
    for (uint32_t pos = 0; pos < 6 && stopped_at == 99; ++pos) {
      try {
        const std::span<const float> logits = ex->step(tok, pos);
        tok = uint32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      } catch (const Error& e) {
        error = e.what();
        kind = e.kind();
        stopped_at = pos;
      }
    }
    fired = uint32_t(emu->faults().fired(id));
    try {
      ex->finish();  // drains the loads begun ahead; may report nothing more, must not hang
    } catch (const Error&) {
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(error << "; stopped at token " << stopped_at << " after " << secs << " s");
  CHECK(fired == 1);
  REQUIRE(stopped_at < 6);
  CHECK(kind == ErrorKind::kCommandFailed);
  CHECK_THAT(error, Catch::Matchers::ContainsSubstring("LBA"));
  CHECK_THAT(error, Catch::Matchers::ContainsSubstring("Unrecovered Read Error"));
  CHECK_THAT(error, Catch::Matchers::ContainsSubstring("DNR"));
  CHECK(secs < 10.0);  // model load and six tokens at most; no 60 s wait, no kernel bound waited out
}

// The bench's mmap loader (bench/llm_tokens_mmap.*) as the NVMe tier of every layer: pages kept mapped
// and pages evicted after each layer's copy both give the logits of every layer in VRAM, to the bit. The
// evicting one does what llm_tokens says of mmap-evict: its worker faults the streamed pages in again
// on every token, where the mapped one took its faults on the first pass only.
TEST_CASE("bench mmap loader: pages kept mapped or evicted give the all-VRAM logits; evicted pages fault in every token") {
  REQUIRE_GPU();
  DeployedModel d(0);
  Opened o(d.device);
  llm::GpuExecOptions all;
  all.resident_layers = o.m.config.n_layer;
  llm::ExecStats sa;
  const auto want = run(*o.ctrl, o.m, all, &sa);
  uint64_t later_faults[2] = {0, 0};  // [kMapped, kEvicted]: the worker's faults after the first token
  for (const bench::MmapResidency residency : {bench::MmapResidency::kMapped, bench::MmapResidency::kEvicted}) {
    const int r = residency == bench::MmapResidency::kEvicted;
    INFO((r ? "evicted" : "mapped"));
    const bench::MmapLayerSource* source = nullptr;
    llm::GpuExecOptions streamed;
    streamed.resident_layers = 0;
    streamed.nvme_source = [&](std::vector<llm::PackedRanges> ranges) {
      auto s = std::make_unique<bench::MmapLayerSource>(std::vector<std::string>{d.image}, o.m, std::move(ranges), nullptr, residency);
      source = s.get();
      return s;
    };
    auto ex = llm::make_gpu_executor(*o.ctrl, o.m, 8, streamed);
    REQUIRE(source != nullptr);
    uint32_t tok = 3;
    uint64_t after_first = 0;
    for (uint32_t pos = 0; pos < want.size(); ++pos) {
      const std::span<const float> logits = ex->step(tok, pos);
      INFO("step " << pos);
      REQUIRE(logits.size() == want[pos].size());
      CHECK(std::memcmp(logits.data(), want[pos].data(), logits.size() * sizeof(float)) == 0);
      tok = uint32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      if (pos == 0) after_first = source->page_faults();
    }
    CHECK(after_first > 0);  // the first pass faults the file in, either way
    later_faults[r] = source->page_faults() - after_first;
    ex->finish();
  }
  // Five more tokens: each of them faulted its layers in again (the worker runs at most two layers
  // ahead, so the last token's are counted too), and more often than the kept mapping ever did.
  CHECK(later_faults[1] >= want.size() - 1);
  CHECK(later_faults[0] < later_faults[1]);
}
