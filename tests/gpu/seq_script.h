// A script of sequences joining and leaving a run of shared passes (the GPU executor's sequence
// slots, issue 37): run on one executor, it gives each sequence's logit rows. tests/gpu/test_llm_seqs.cpp
// holds them to each sequence alone; test_llm_multi_gpu_passes.cpp holds 2 GPUs' to one GPU's.
#pragma once
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <span>
#include <vector>

#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/generate.h"
#include "examples/llm/engine/model_on_device.h"
#include "examples/llm/engine/scheduler.h"
#include "tests/llm/tiny_model.h"

namespace gpunvme::test {

// A sequence of the script: its prompt, the step (pass) at which it joins, its greedy tokens after it.
struct Seq {
  std::vector<uint32_t> prompt;
  uint32_t join = 0, decode = 0;
};

using Rows = std::vector<std::vector<float>>;  // a sequence's logits: the prompt's last, then each token's

inline uint32_t argmax_of(std::span<const float> row) { return uint32_t(std::max_element(row.begin(), row.end()) - row.begin()); }

// n token ids below 503 from `seed`.
inline std::vector<uint32_t> prompt_of(uint32_t n, uint32_t seed) {
  std::vector<uint32_t> p(n);
  for (uint32_t i = 0; i < n; ++i) p[i] = (seed * 131 + i * 37) % 500 + 3;
  return p;
}

// The script together: each pass carries, in descending slot order, every joined sequence's prompt (the
// pass it joins in) or its next token; a sequence that has all its tokens leaves (end_sequence) and
// its slot goes to the next one to join.
inline std::vector<Rows> together(std::span<host::Controller* const> ctrls, const llm::ModelOnDevice& m, llm::GpuExecOptions o,
                                  const std::vector<Seq>& script, uint32_t slots, uint32_t n_ctx) {
  o.max_seqs = slots;
  auto ex = llm::make_gpu_executor(ctrls, m, n_ctx, o);
  REQUIRE(ex->max_seqs() == slots);
  std::vector<Rows> rows(script.size());
  std::map<uint32_t, size_t> in_slot;  // slot -> sequence
  std::vector<uint32_t> free(slots);
  std::iota(free.begin(), free.end(), 0u);
  for (uint32_t step = 0; step < 64; ++step) {
    for (size_t i = 0; i < script.size(); ++i)
      if (script[i].join == step) {
        REQUIRE(!free.empty());
        in_slot[free.front()] = i;
        free.erase(free.begin());
      }
    const bool more = std::any_of(script.begin(), script.end(), [&](const Seq& q) { return q.join > step; });
    if (in_slot.empty() && !more) break;
    std::vector<llm::PassToken> pass;
    std::vector<size_t> row_of;  // the pass's logit rows' sequences
    for (auto it = in_slot.rbegin(); it != in_slot.rend(); ++it) {
      const Seq& s = script[it->second];
      Rows& r = rows[it->second];
      if (r.empty()) {
        for (size_t p = 0; p < s.prompt.size(); ++p) pass.push_back({s.prompt[p], it->first, uint32_t(p), p + 1 == s.prompt.size()});
      } else {
        pass.push_back({argmax_of(r.back()), it->first, uint32_t(s.prompt.size() + r.size() - 1), true});
      }
      row_of.push_back(it->second);
    }
    if (pass.empty()) continue;
    const std::span<const float> l = ex->pass(pass);
    const size_t V = m.config.n_vocab;
    REQUIRE(l.size() == row_of.size() * V);
    for (size_t k = 0; k < row_of.size(); ++k) rows[row_of[k]].emplace_back(l.begin() + k * V, l.begin() + (k + 1) * V);
    for (auto it = in_slot.begin(); it != in_slot.end();) {
      if (rows[it->second].size() == script[it->second].decode + 1) {
        ex->end_sequence(it->first);
        free.insert(std::upper_bound(free.begin(), free.end(), it->first), it->first);
        it = in_slot.erase(it);
      } else {
        ++it;
      }
    }
  }
  ex->finish();
  return rows;
}

// The drafts' requests (tests/llm/test_scheduler_draft.cpp's prompts: patterns the MoE and gemma3
// models go on repeating on the CPU, drafts accepted there), at most 32 tokens, so every pass's
// segments stay on the small passes' kernels whatever chunks the scheduler cuts; greedy and sampled.
inline std::vector<llm::SeqRequest> draft_requests(uint32_t V, bool moe) {
  auto rep = [&](uint32_t period, uint32_t seed) {
    const std::vector<uint32_t> q = llm::test::random_tokens(period, V, seed);
    std::vector<uint32_t> p;
    for (uint32_t t = 0; t < 12 / period + 1; ++t) p.insert(p.end(), q.begin(), q.end());
    return p;
  };
  const llm::SamplerOptions greedy{}, sampled{.temperature = 0.3f, .top_k = 3, .top_p = 0.95f, .seed = 9};
  return {{moe ? rep(2, 7) : rep(6, 12), 24, greedy, {}}, {rep(3, 4), 20, sampled, {}},
          {moe ? rep(6, 5) : rep(5, 3), 18, greedy, {}}, {rep(4, 23), 22, sampled, {}}};
}

// The drafts' cases: the MoE and gemma3 generated models, every layer in VRAM and every layer
// streamed, passes of up to 64 tokens: fn(namespaces, model, draft_requests, options, "model, tier").
inline void for_draft_cases(const std::function<void(llm::DeviceSet&, const llm::ModelOnDevice&, const std::vector<llm::SeqRequest>&,
                                                     llm::GpuExecOptions, const std::string&)>& fn) {
  for (const std::string d : {"emu:gen,shape=tiny-qwen3moe,type=q4_k", "emu:gen,shape=tiny-gemma3,type=q6_k"}) {
    llm::DeviceSet set({d});
    const llm::ModelOnDevice m = llm::open_model(set.namespaces());
    const std::vector<llm::SeqRequest> reqs = draft_requests(m.config.n_vocab, d.find("moe") != std::string::npos);
    llm::GpuExecOptions vram, streamed;
    vram.resident_layers = m.config.n_layer;
    streamed.resident_layers = 0;
    for (llm::GpuExecOptions o : {vram, streamed}) {
      o.max_batch = 64;
      const std::string label = d + (o.resident_layers == 0u ? ", streamed" : ", in VRAM");
      INFO(label);
      fn(set, m, reqs, o, label);
    }
  }
}

// Each request's tokens by generate() alone in one slot, without drafts.
inline std::vector<std::vector<uint32_t>> alone_tokens(std::span<host::Controller* const> ctrls, const llm::ModelOnDevice& m,
                                                       llm::GpuExecOptions o, const std::vector<llm::SeqRequest>& reqs, uint32_t n_ctx) {
  o.max_seqs = 1;
  std::vector<std::vector<uint32_t>> want;
  for (const llm::SeqRequest& r : reqs) {
    auto one = llm::make_gpu_executor(ctrls, m, n_ctx, o);
    llm::Sampler s(r.sampling);
    want.push_back(llm::generate(*one, r.prompt, r.max_tokens, s, {}, {}, [](uint32_t, std::span<const float>) {}).tokens);
  }
  return want;
}

// The requests through the Scheduler with lookup drafts of k tokens on one executor of `slots` slots:
// two join at step 0, two at step 2 (the fourth waits for a slot); each request's tokens, the counters.
inline std::vector<std::vector<uint32_t>> scheduled(std::span<host::Controller* const> ctrls, const llm::ModelOnDevice& m,
                                                    llm::GpuExecOptions o, const std::vector<llm::SeqRequest>& reqs, uint32_t n_ctx,
                                                    uint32_t slots, uint32_t k, llm::SchedulerCounters* counters) {
  o.max_seqs = slots;
  auto ex = llm::make_gpu_executor(ctrls, m, n_ctx, o);
  llm::Scheduler sched(*ex, n_ctx, {.draft = llm::LookupOptions{.k = k}});
  std::map<uint64_t, std::vector<uint32_t>> got;
  std::vector<uint64_t> ids;
  for (uint32_t step = 0; step < 200 && (step < 3 || !sched.idle()); ++step) {
    if (step == 0 || step == 2)
      for (size_t j = ids.size(), end = std::min(j + 2, reqs.size()); j < end; ++j) ids.push_back(sched.submit(reqs[j]));
    for (const llm::SeqEvent& e : sched.step()) got[e.id].push_back(e.token);
  }
  REQUIRE(sched.idle());
  *counters = sched.counters();
  ex->finish();
  std::vector<std::vector<uint32_t>> out;
  for (uint64_t id : ids) out.push_back(got[id]);
  return out;
}

// The requests through the Scheduler with drafts of 8 over three slots (the fourth waits for one; k = 8
// for three sequences asks for up to 27 rows, beside a prompt's row or two: the 32 rows a GPU pass
// returns bound them), each request's tokens held to `want`; the drafts' counts printed after `label`.
// Returns the drafted tokens accepted.
inline uint64_t check_scheduled(std::span<host::Controller* const> ctrls, const llm::ModelOnDevice& m, const llm::GpuExecOptions& o,
                                const std::vector<llm::SeqRequest>& reqs, const std::vector<std::vector<uint32_t>>& want, uint32_t n_ctx,
                                const std::string& label) {
  llm::SchedulerCounters c;
  const std::vector<std::vector<uint32_t>> got = scheduled(ctrls, m, o, reqs, n_ctx, 3, 8, &c);
  uint64_t tokens = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i);
    REQUIRE(got[i] == want[i]);
    tokens += reqs[i].max_tokens;
  }
  std::printf("%s: %llu drafted, %llu accepted, %llu passes for %llu tokens\n", label.c_str(), (unsigned long long)c.drafted_tokens,
              (unsigned long long)c.accepted_tokens, (unsigned long long)c.passes, (unsigned long long)c.generated_tokens);
  REQUIRE(c.generated_tokens == tokens);
  REQUIRE(c.drafted_tokens > 0);
  return c.accepted_tokens;
}

}  // namespace gpunvme::test
