#include "examples/llm/engine/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "examples/llm/engine/speculative.h"
#include "host/cpu_clock.h"

namespace gpunvme::llm {
namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

NonFiniteLogits::NonFiniteLogits(uint32_t pos)
    : std::runtime_error("the logits after position " + std::to_string(pos) +
                         " are not finite (NaN or Inf): the model's weights hold NaN/Inf, or the computation "
                         "overflowed; `gpunvme verify` tells whether the device's copy was damaged (re-deploy it then)"),
      position(pos) {}

GenerateResult generate(Executor& ex, const std::vector<uint32_t>& prompt, uint32_t n_new, Sampler& sampler, const std::set<uint32_t>& eog,
                        const GenerateOptions& o, const std::function<void(uint32_t, std::span<const float>)>& on_token) {
  if (prompt.empty()) throw std::runtime_error("generate: the prompt has no tokens");
  if (o.batch == 0) throw std::runtime_error("generate: a pass needs at least one token (batch 0)");
  GenerateResult r;
  r.prompt_tokens = uint32_t(prompt.size());
  const uint32_t chunk = std::min(o.batch, ex.max_batch());
  if (o.warmup) {  // passes at position 0: the prompt's first pass below overwrites what they cached
    ex.pass(std::span(prompt).first(std::min<size_t>(chunk, prompt.size())), 0, false);
    ex.pass(std::span(prompt).first(1), 0, true);
  }
  // Greedy picks made by the executor where the logits are (GenerateOptions::token_logits): nothing on
  // the host reads a row then.
  const bool executor_picks = !o.token_logits && sampler.greedy() && !o.draft;
  auto t0 = std::chrono::steady_clock::now();
  std::span<const float> logits;
  std::optional<GreedyPick> first;  // executor_picks: the prompt's last pass's
  for (uint32_t p = 0; p < prompt.size(); p += chunk) {
    const auto part = std::span(prompt).subspan(p, std::min<size_t>(chunk, prompt.size() - p));
    if (executor_picks && p + chunk >= prompt.size()) first = ex.pass_greedy(one_sequence(part, p, false));
    else logits = ex.pass(part, p, false);
    ++r.prompt_passes;
  }
  r.prompt_seconds = since(t0);
  t0 = std::chrono::steady_clock::now();
  const double cpu0 = host::calling_thread_cpu_seconds();
  std::vector<uint32_t> context = prompt;  // the prompt and every token generated so far
  bool done = n_new == 0;
  auto emit = [&](uint32_t tok, std::span<const float> from) {
    r.tokens.push_back(tok);
    context.push_back(tok);
    on_token(tok, from);
    if (eog.count(tok)) r.stopped_at_eos = done = true;
    if (r.tokens.size() == n_new) done = true;
  };
  // Every token is picked here, from a row of logits predicting the token after position `at`.
  auto pick = [&](std::span<const float> row, uint32_t at) {
    if (!all_finite(row)) throw NonFiniteLogits(at);
    return sampler.pick(row);
  };
  // The executor's pick, with the host's refusal of a row that is not all finite.
  auto picked = [&](const GreedyPick& g, uint32_t at) {
    if (g.non_finite) throw NonFiniteLogits(at);
    return g.id;
  };
  if (!done && first) emit(picked(*first, uint32_t(prompt.size()) - 1), {});
  else if (!done) emit(pick(logits, uint32_t(prompt.size()) - 1), logits);
  // The last generated token is not in the KV cache yet: each pass runs it at `pos`, followed by the
  // draft, and keeps what verification keeps.
  uint32_t pos = uint32_t(prompt.size());
  std::vector<uint32_t> batch;
  if (!done && executor_picks && ex.chains()) {
    // Chained (Executor::submit_greedy): while the host waits for one pass's pick, the next pass, whose
    // token is that pick taken on the device, is already queued behind it; one is run ahead only while
    // another token is still wanted after the current one (an end-of-generation token may still drop it).
    ex.submit_greedy({r.tokens.back(), 0, pos, true}, false);
    for (uint32_t queued = 1; queued > 0;) {
      if (!done && queued == 1 && r.tokens.size() + 1 < n_new) {
        ex.submit_greedy({0, 0, pos + 1, true}, true);
        ++queued;
      }
      const GreedyPick g = ex.collect_greedy();
      --queued;
      ++r.decode_steps;
      if (done) continue;  // run ahead past the end: dropped
      emit(picked(g, pos), {});
      ++pos;
    }
  }
  while (!done && executor_picks) {  // one token a pass, its pick from the executor
    const uint32_t tok = r.tokens.back();
    const GreedyPick g = ex.pass_greedy(one_sequence(std::span(&tok, 1), pos, true));
    ++r.decode_steps;
    emit(picked(g, pos), {});
    ++pos;
  }
  while (!done) {
    batch.assign(1, r.tokens.back());
    if (o.draft) {
      // No more drafts than tokens still wanted after this pass's first, nor than a pass returns rows for.
      LookupOptions d = *o.draft;
      d.k = std::min({d.k, n_new - uint32_t(r.tokens.size()) - 1, ex.max_logit_rows() - 1});
      const std::vector<uint32_t> drafted = draft_lookup(context, d);
      batch.insert(batch.end(), drafted.begin(), drafted.end());
    }
    const std::span<const float> rows = ex.pass(batch, pos, true);
    ++r.decode_steps;
    const uint32_t vocab = uint32_t(rows.size() / batch.size());
    uint32_t row_pos = pos;  // verify() picks from the rows in order: row i predicts after pos + i
    const Verdict v = verify(std::span(batch).subspan(1), rows, vocab, [&](std::span<const float> row) { return pick(row, row_pos++); });
    r.drafted += batch.size() - 1;
    r.accepted += v.accepted;
    for (size_t i = 0; i < v.tokens.size() && !done; ++i) emit(v.tokens[i], rows.subspan(i * vocab, vocab));
    pos = v.next_pos(pos);
  }
  ex.finish();
  r.decode_seconds = since(t0);
  r.engine_cpu_seconds = host::calling_thread_cpu_seconds() - cpu0;
  r.exec = ex.stats();
  return r;
}

}  // namespace gpunvme::llm
