// The GPU executor's sequence slots (issue 37): sequences that join and leave a run of shared passes,
// each with a prompt (one of more than kSmallPassTokens tokens, on the fast prompt kernels) and then
// greedy tokens, get the logits they get alone, to the bit: dense and MoE, a sliding-window model and
// gpt-oss's sinks and MXFP4, every layer in VRAM and every layer streamed (fetched experts), the KV
// cache in GPU memory and in pinned host memory (a sequence alone keeps its cache in VRAM). The
// neighbours' rows differ (a mixed-up cache would show), and refused passes change nothing. And the
// Scheduler with lookup drafts on the GPU executor: each request's tokens (greedy and seeded sampling)
// those generate() gives it alone without drafts, drafts accepted, the logit rows a pass returns bounding them.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/generate.h"
#include "examples/llm/engine/model_on_device.h"
#include "examples/llm/engine/scheduler.h"
#include "gpu_rig.h"
#include "seq_script.h"
#include "tests/llm/tiny_model.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr uint32_t kCtx = 64;

using test::argmax_of;
using test::prompt_of;
using test::Rows;
using test::Seq;

// The sequence alone: its prompt in one pass of slot 0, then one token per pass.
Rows alone(llm::DeviceSet& set, const llm::ModelOnDevice& m, llm::GpuExecOptions o, const Seq& s) {
  o.max_seqs = 1;
  auto ex = llm::make_gpu_executor(set.controllers(), m, kCtx, o);
  Rows rows;
  std::span<const float> l = ex->pass(s.prompt, 0, false);
  rows.emplace_back(l.begin(), l.end());
  for (uint32_t i = 0; i < s.decode; ++i) {
    l = ex->step(argmax_of(rows.back()), uint32_t(s.prompt.size()) + i);
    rows.emplace_back(l.begin(), l.end());
  }
  ex->finish();
  return rows;
}

std::vector<Rows> together(llm::DeviceSet& set, const llm::ModelOnDevice& m, const llm::GpuExecOptions& o, const std::vector<Seq>& script,
                           uint32_t slots) {
  return test::together(set.controllers(), m, o, script, slots, kCtx);
}

void check_model(const std::string& device) {
  llm::DeviceSet set({device});
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  // A joins first; B (5-token prompt) and C (40 tokens: the fast kernels) while A decodes; D takes A's
  // slot after A leaves, with A's own prompt (so its rows are A's, though slot 0 held A's cache).
  const std::vector<Seq> script = {{{3}, 0, 6}, {prompt_of(5, 1), 1, 4}, {prompt_of(40, 2), 2, 3}, {{3}, 8, 5}};
  llm::GpuExecOptions vram, streamed, kv_host;
  vram.resident_layers = m.config.n_layer;
  streamed.resident_layers = 0;  // every layer (and every expert) read from the namespace per pass
  kv_host = streamed;
  kv_host.kv_in_host = true;  // the cache in pinned host memory, read over the link
  for (llm::GpuExecOptions o : {vram, streamed, kv_host}) {
    o.max_batch = 64;
    INFO(device << ", " << (o.resident_layers == 0u ? "streamed" : "in VRAM") << (o.kv_in_host ? ", KV in host memory" : ""));
    const std::vector<Rows> got = together(set, m, o, script, 3);
    for (size_t i = 0; i < script.size(); ++i) {
      INFO("sequence " << i);
      const Rows want = alone(set, m, o, script[i]);
      REQUIRE(got[i].size() == want.size());
      for (size_t r = 0; r < want.size(); ++r) {
        INFO("row " << r);
        REQUIRE(std::memcmp(got[i][r].data(), want[r].data(), want[r].size() * sizeof(float)) == 0);
      }
    }
    REQUIRE(std::memcmp(got[1][0].data(), got[0][0].data(), got[0][0].size() * sizeof(float)) != 0);
  }
}

}  // namespace

TEST_CASE("llm seqs: sequences joining and leaving shared GPU passes get their logits alone, to the bit", "[gpu][llm][seqs]") {
  REQUIRE_GPU();
  for (const char* d : {"emu:gen,shape=tiny,type=q4_k", "emu:gen,shape=tiny-qwen3moe,type=q4_k", "emu:gen,shape=tiny-gemma3,type=q6_k",
                        "emu:gen,shape=tiny-gpt-oss,type=mxfp4"})
    check_model(d);
}

TEST_CASE("llm seqs: the GPU executor refuses bad slots and skips, and a refused pass changes nothing", "[gpu][llm][seqs]") {
  REQUIRE_GPU();
  llm::DeviceSet set({"emu:gen,shape=tiny,type=q4_k"});
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  llm::GpuExecOptions o;
  o.max_batch = 8;
  const Seq a{{3}, 0, 3};
  const Rows want = alone(set, m, o, a);
  o.max_seqs = 2;
  auto ex = llm::make_gpu_executor(set.controllers(), m, kCtx, o);
  REQUIRE_THROWS_WITH(ex->end_sequence(2), ContainsSubstring("sequence slot 2 does not exist: there are 2"));
  const std::vector<llm::PassToken> bad_slot = {{3, 2, 0, true}};
  REQUIRE_THROWS_WITH(ex->pass(bad_slot), ContainsSubstring("token 0 of the pass: sequence slot 2 does not exist"));
  const std::vector<llm::PassToken> skip = {{3, 1, 2, true}};
  REQUIRE_THROWS_WITH(ex->pass(skip), ContainsSubstring("which holds none: a sequence starts at position 0"));
  const std::vector<llm::PassToken> too_many(9, llm::PassToken{3, 1, 0, false});
  REQUIRE_THROWS_WITH(ex->pass(too_many), ContainsSubstring("this one takes 1..8"));
  const std::vector<llm::PassToken> outside = {{100000, 1, 0, true}};
  REQUIRE_THROWS_WITH(ex->pass(outside), ContainsSubstring("outside the vocabulary"));
  // Slot 1 after the refusals: A's rows, beside slot 0's other sequence.
  uint32_t tok = 3, other = 9;
  for (uint32_t pos = 0; pos < want.size(); ++pos) {
    const std::vector<llm::PassToken> pass = {{other, 0, pos, true}, {tok, 1, pos, true}};
    const std::span<const float> l = ex->pass(pass);
    const std::span<const float> mine = l.subspan(m.config.n_vocab);
    REQUIRE(std::memcmp(mine.data(), want[pos].data(), want[pos].size() * sizeof(float)) == 0);
    tok = argmax_of(mine);
    other = argmax_of(l.first(m.config.n_vocab));
  }
  ex->finish();
}

TEST_CASE("llm seqs: the Scheduler's lookup drafts on the GPU executor keep every request's tokens as alone", "[gpu][llm][seqs][draft]") {
  REQUIRE_GPU();
  uint64_t accepted = 0;
  test::for_draft_cases([&](llm::DeviceSet& set, const llm::ModelOnDevice& m, const std::vector<llm::SeqRequest>& reqs,
                            const llm::GpuExecOptions& o, const std::string& label) {
    const std::vector<std::vector<uint32_t>> want = test::alone_tokens(set.controllers(), m, o, reqs, kCtx);
    accepted += test::check_scheduled(set.controllers(), m, o, reqs, want, kCtx, "llm seqs drafts: " + label);
  });
  REQUIRE(accepted > 0);  // verification seen keeping drafts, not only rejecting them
}
