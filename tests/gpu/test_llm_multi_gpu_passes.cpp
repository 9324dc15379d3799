// Several GPUs of one host (issue 35) with what composes with the split: passes of several sequences,
// speculative verification (generate()'s lookup drafts and the Scheduler's), MoE experts fetched and
// read ahead (pre-gating, the one-token lag) by each GPU for its own layers, all held to one GPU's
// bits; and a GPU failing mid-run (the test hook GPUNVME_TEST_GPU_FAIL, multi_gpu_executor.cpp): the
// error names the GPU, comes within the abort's bound, and the executor returns nothing after it.
// Skips without 2 GPUs (the lead's 2-GPU machine runs it).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/generate.h"
#include "examples/llm/engine/model_on_device.h"
#include "examples/llm/engine/scheduler.h"
#include "llm_fixtures.h"
#include "seq_script.h"
#include "two_gpus.h"
#include "tests/llm/tiny_model.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;
using llm::test::same_bits;

namespace {

constexpr uint32_t kCtx = 64;

// The engine's generated models: dense, MoE (qwen3moe) and sliding-window (gemma3), 2 layers: one per GPU.
constexpr const char* kModels[] = {"emu:gen,shape=tiny,type=q4_k", "emu:gen,shape=tiny-qwen3moe,type=q4_k", "emu:gen,shape=tiny-gemma3,type=q6_k"};

llm::GpuExecOptions on_gpus(llm::GpuExecOptions o, uint32_t gpus) {
  o.gpus = gpus;
  return o;
}

// Sets an environment variable for the scope (the fault hook is read when the executor is made).
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const std::string& v) : name(n) { setenv(n, v.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name); }
};

}  // namespace

TEST_CASE("llm --gpus 2: several sequences per pass give one GPU's rows to the bit", "[gpu][llm][seqs]") {
  REQUIRE_TWO_GPUS();
  for (const char* d : kModels) {
    llm::DeviceSet set({d});
    const llm::ModelOnDevice m = llm::open_model(set.namespaces());
    // test_llm_seqs.cpp's script: A alone, B (5 tokens) and C (40: the fast prompt kernels, a streamed
    // layer copied once) joining while A decodes, D taking A's slot after A leaves.
    const std::vector<test::Seq> script = {{{3}, 0, 6}, {test::prompt_of(5, 1), 1, 4}, {test::prompt_of(40, 2), 2, 3}, {{3}, 8, 5}};
    llm::GpuExecOptions vram, streamed, kv_host;
    vram.resident_layers = m.config.n_layer;
    streamed.resident_layers = 0;  // each GPU streams its layer (and fetches its experts) per pass
    kv_host = streamed;
    kv_host.kv_in_host = true;  // each GPU's cache of its layer in pinned host memory
    for (llm::GpuExecOptions o : {vram, streamed, kv_host}) {
      o.max_batch = 64;
      INFO(d << ", " << (o.resident_layers == 0u ? "streamed" : "in VRAM") << (o.kv_in_host ? ", KV in host memory" : ""));
      const std::vector<test::Rows> want = test::together(set.controllers(), m, o, script, 3, kCtx);
      const std::vector<test::Rows> got = test::together(set.controllers(), m, on_gpus(o, 2), script, 3, kCtx);
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        INFO("sequence " << i);
        REQUIRE(got[i].size() == want[i].size());
        for (size_t r = 0; r < want[i].size(); ++r) {
          INFO("row " << r);
          REQUIRE(same_bits(got[i][r], want[i][r]));
        }
      }
      REQUIRE(!same_bits(got[1][0], got[0][0]));  // the neighbours' rows differ: a mixed-up cache would show
      REQUIRE(same_bits(got[3][0], got[0][0]));   // D (A's prompt in A's old slot) has A's rows
    }
    // Each GPU sizes its own cache: --max-seqs auto would let them disagree, so it is refused.
    llm::GpuExecOptions autos;
    autos.resident_layers = m.config.n_layer;
    autos.gpus = 2;
    autos.max_seqs = 0;
    REQUIRE_THROWS_WITH(llm::make_gpu_executor(set.controllers(), m, kCtx, autos), ContainsSubstring("--max-seqs auto over several GPUs"));
  }
}

TEST_CASE("llm --gpus 2: speculative verification gives one GPU's plain tokens, and one GPU's rows to the bit", "[gpu][llm][draft]") {
  REQUIRE_TWO_GPUS();
  uint64_t accepted = 0;
  test::for_draft_cases([&](llm::DeviceSet& set, const llm::ModelOnDevice& m, const std::vector<llm::SeqRequest>& reqs,
                            llm::GpuExecOptions o, const std::string& label) {
    const std::vector<std::vector<uint32_t>> plain = test::alone_tokens(set.controllers(), m, o, reqs, kCtx);  // one GPU, no drafts
    // generate() with lookup drafts (k = 4): each pass verifies [token, drafts...]; each row picked
    // from, kept with its token, on one GPU and on two.
    const llm::GenerateOptions spec{.draft = llm::LookupOptions{.k = 4}};
    for (size_t i = 0; i < reqs.size(); ++i) {
      INFO("request " << i);
      std::vector<std::vector<float>> rows[2];
      llm::GenerateResult res[2];
      for (const uint32_t gpus : {1u, 2u}) {
        o.max_seqs = 1;
        auto ex = llm::make_gpu_executor(set.controllers(), m, kCtx, on_gpus(o, gpus));
        llm::Sampler s(reqs[i].sampling);
        res[gpus - 1] = llm::generate(*ex, reqs[i].prompt, reqs[i].max_tokens, s, {}, spec,
                                      [&](uint32_t, std::span<const float> l) { rows[gpus - 1].emplace_back(l.begin(), l.end()); });
        ex->finish();
      }
      REQUIRE(res[1].tokens == plain[i]);
      REQUIRE(res[1].tokens == res[0].tokens);
      REQUIRE(res[1].drafted == res[0].drafted);
      REQUIRE(res[1].accepted == res[0].accepted);
      REQUIRE(rows[1].size() == rows[0].size());
      for (size_t r = 0; r < rows[0].size(); ++r) {
        INFO("token " << r);
        REQUIRE(same_bits(rows[1][r], rows[0][r]));
      }
      accepted += res[1].accepted;
    }
    // The Scheduler's drafts over three slots on two GPUs: each request's plain tokens.
    accepted += test::check_scheduled(set.controllers(), m, on_gpus(o, 2), reqs, plain, kCtx, "llm --gpus 2 drafts: " + label);
  });
  REQUIRE(accepted > 0);  // verification seen keeping drafts across the GPUs, not only rejecting them
}

// Every dense part in VRAM and every layer's experts fetched on both GPUs (each GPU's budget: the
// dense bytes and the KV cache, no room for a layer's experts), so each GPU fetches, and reads ahead,
// the experts of its own layers into its own cache from its own queues.
TEST_CASE("llm --gpus 2: MoE experts fetched and read ahead by each GPU for its layers, one GPU's logits to the bit", "[gpu][llm]") {
  REQUIRE_TWO_GPUS();
  test::DeployedModel d(8, "multi-gpu-test");
  test::Opened o(d.device);
  llm::GpuExecOptions one;
  one.resident_layers = o.m.config.n_layer;
  llm::ExecStats s1;
  const auto want = test::run(*o.ctrl, o.m, one, &s1);
  uint64_t all_experts = 0;
  for (const llm::LayerBytes& b : llm::layer_bytes(o.m)) all_experts += b.experts;
  llm::GpuExecOptions base;
  base.gpus = 2;
  base.vram_budgets = {test::dense_bytes(o.m) + test::run_kv_bytes(o.m), test::dense_bytes(o.m) + test::run_kv_bytes(o.m)};
  base.ram_budget = 0;
  llm::GpuExecOptions pregate = base, pregate_dflt = base, lag = base, off = base;
  pregate.expert_pregate = 2;
  lag.expert_prefetch = true;  // the one-token lag, beside a cache of half the experts
  lag.expert_cache_bytes = all_experts / 2;
  off.expert_prefetch = false;  // no read-ahead of either kind
  const struct {
    const char* name;
    llm::GpuExecOptions o;
  } cases[] = {{"pre-gating 2", pregate}, {"pre-gating by default", pregate_dflt}, {"one-token lag", lag}, {"no read-ahead", off}};
  for (const auto& c : cases) {
    INFO(c.name);
    llm::ExecStats s;
    test::check_steps(test::run(*o.ctrl, o.m, c.o, &s), want);
    REQUIRE(s.gpus.size() == 2);
    CHECK(s.has_experts);
    CHECK(s.resident_layers == 3);  // every dense part in VRAM, on the GPU of its range
    uint64_t reads = 0;
    for (uint32_t g = 0; g < 2; ++g) {
      const llm::GpuShare& share = s.gpus[g];
      INFO("GPU " << g << ", layers " << share.layers.begin << "-" << share.layers.end);
      std::printf("llm --gpus 2 experts, %s: GPU %u layers %u-%u: %llu requested, %llu hits, %llu read ahead (%llu used, %llu wasted), "
                  "lag %llu tokens\n", c.name, share.gpu, share.layers.begin, share.layers.end - 1, (unsigned long long)share.experts_requested,
                  (unsigned long long)share.expert_hits, (unsigned long long)share.prefetch_reads, (unsigned long long)share.prefetch_hits,
                  (unsigned long long)share.prefetch_wasted, (unsigned long long)share.lag.tokens);
      CHECK(share.layers.size() >= 1);
      CHECK(share.experts_requested > 0);  // it fetched its own layers' experts
      CHECK(share.lag.tokens > 0);  // its own layers' routing compared token to token
      CHECK(share.prefetch_hits + share.prefetch_wasted <= share.prefetch_reads);
      // Pre-gating of a GPU with two fetched layers predicts its second from its first.
      if (c.o.expert_pregate && share.layers.size() >= 2) CHECK(share.prefetch_reads > 0);
      reads += share.prefetch_reads;
    }
    CHECK(reads == s.prefetch.reads);
    if (&c.o == &cases[0].o) CHECK(s.expert_pregate == 2);
    if (&c.o == &cases[1].o) CHECK(s.expert_pregate == 1);
    if (&c.o == &cases[2].o) {
      CHECK(s.expert_prefetch);
      CHECK(s.prefetch.prefetches == 5 * 3);  // every token after the first, at each GPU's fetched layers (2 + 1)
    }
    if (&c.o == &cases[3].o) {
      CHECK(s.expert_pregate == 0);
      CHECK(!s.expert_prefetch);
      CHECK(s.prefetch.prefetches == 0);
    }
    if (c.o.expert_pregate || &c.o == &cases[1].o) CHECK(s.prefetch.prefetches > 0);
  }
}

TEST_CASE("llm --gpus 2: a GPU failing mid-run is named, within the abort's bound, and nothing is returned after it", "[gpu][llm]") {
  REQUIRE_TWO_GPUS();
  const test::DeployedModel d(0, "multi-gpu-test");
  const test::Opened o(d.device);
  llm::GpuExecOptions two;
  two.gpus = 2;
  two.resident_layers = 1;  // GPU 1's layer streamed: its reads run ahead of the failure
  llm::ExecStats s1;
  const auto want = test::run(*o.ctrl, o.m, on_gpus(two, 1), &s1);
  // The last GPU failing (the first's hidden state sent to no one), and the first (CUDA device 1 listed
  // first: the last left waiting on NCCL for a hidden state that never comes); the error names the CUDA id.
  const struct {
    std::vector<int> ids;
    const char* fault;
  } cases[] = {{{}, "1:3"}, {{1, 0}, "1:2"}};
  for (const auto& c : cases) {
    INFO("GPUNVME_TEST_GPU_FAIL=" << c.fault << (c.ids.empty() ? "" : ", --gpus 1,0"));
    llm::GpuExecOptions listed = two;
    listed.gpu_ids = c.ids;
    std::unique_ptr<llm::Executor> ex;
    {
      ScopedEnv fault("GPUNVME_TEST_GPU_FAIL", c.fault);
      ex = llm::make_gpu_executor(*o.ctrl, o.m, 8, listed);
    }
    const uint32_t fail_at = uint32_t(c.fault[2] - '0');
    uint32_t tok = 3;
    for (uint32_t pos = 0; pos < fail_at; ++pos) {  // the passes before it: one GPU's logits
      INFO("step " << pos);
      REQUIRE(same_bits(ex->step(tok, pos), want[pos]));
      tok = test::argmax_of(want[pos]);
    }
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE_THROWS_WITH(ex->step(tok, fail_at),
                        ContainsSubstring("GPU 1 (pass): a failure injected by GPUNVME_TEST_GPU_FAIL=" + std::string(c.fault)));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("llm --gpus 2, GPUNVME_TEST_GPU_FAIL=%s: the failing pass ended in %.3f s\n", c.fault, s);
    CHECK(s < 45);  // the others see the abort (kAbortTimeout 30 s at most; at once where NCCL's kernels end)
    // Nothing after it: every call refused naming the first failure; finishing and destroying end.
    REQUIRE_THROWS_WITH(ex->step(tok, fail_at), ContainsSubstring("stopped after an earlier failure: GPU 1 (pass)"));
    REQUIRE_THROWS_WITH(ex->stats(), ContainsSubstring("stopped after an earlier failure"));
    CHECK_NOTHROW(ex->finish());
    const auto t1 = std::chrono::steady_clock::now();
    ex.reset();
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() < 45);
  }
  // The GPUs serve a new executor after it: one GPU's logits.
  llm::ExecStats s2;
  test::check_steps(test::run(*o.ctrl, o.m, two, &s2), want);
  // A malformed hook is refused, not ignored.
  ScopedEnv bad("GPUNVME_TEST_GPU_FAIL", "one");
  REQUIRE_THROWS_WITH(llm::make_gpu_executor(*o.ctrl, o.m, 8, two), ContainsSubstring("GPUNVME_TEST_GPU_FAIL='one': give ID:PASS"));
}

TEST_CASE("llm --gpus 2: a budget that leaves a GPU no layer is refused naming the GPU, before any starts", "[gpu][llm]") {
  REQUIRE_TWO_GPUS();
  test::DeployedModel d(0, "multi-gpu-test");
  test::Opened o(d.device);
  llm::GpuExecOptions two;
  two.gpus = 2;
  two.gpu_ids = {1, 0};
  two.vram_budgets = {1ull << 30, 1024};  // CUDA device 0, listed second: less than one layer's KV cache
  REQUIRE_THROWS_WITH(llm::make_gpu_executor(*o.ctrl, o.m, 8, two),
                      ContainsSubstring("--vram-budget gives GPU 0 ") && ContainsSubstring("it would hold no layer"));
}
