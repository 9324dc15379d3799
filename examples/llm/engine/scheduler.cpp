#include "examples/llm/engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "examples/llm/engine/generate.h"
#include "examples/llm/engine/speculative.h"

namespace gpunvme::llm {

// No more sequences at once than a pass holds tokens: then every decoding token fits in each pass,
// with room for at least one prompt token while a sequence is still reading its prompt.
Scheduler::Scheduler(Executor& ex, uint32_t n_ctx, SchedulerOptions o)
    : ex_(ex), n_ctx_(n_ctx), o_(o), slots_(std::min(ex.max_seqs(), ex.max_batch())) {}

uint64_t Scheduler::submit(SeqRequest r) {
  if (r.prompt.empty()) throw std::invalid_argument("the prompt is empty: a request needs at least one token");
  if (r.max_tokens == 0) throw std::invalid_argument("max_tokens is 0: a request generates at least one token");
  if (uint64_t(r.prompt.size()) + r.max_tokens > n_ctx_)
    throw std::invalid_argument("a prompt of " + std::to_string(r.prompt.size()) + " tokens and max_tokens " + std::to_string(r.max_tokens) +
                                " need " + std::to_string(uint64_t(r.prompt.size()) + r.max_tokens) + " positions, past the context (" +
                                std::to_string(n_ctx_) + " tokens): shorten the prompt or lower max_tokens");
  const SamplerOptions& so = r.sampling;
  if (!std::isfinite(so.temperature) || so.temperature < 0 || !(so.top_p >= 0))
    throw std::invalid_argument("temperature " + std::to_string(so.temperature) + ", top_p " + std::to_string(so.top_p) +
                                ": temperature takes 0 (greedy) or more, top_p 0 to 1 (1: off)");
  if (queue_.size() >= o_.max_queued)
    throw QueueFull(std::to_string(queue_.size()) + " requests already wait for a sequence slot (max queued " + std::to_string(o_.max_queued) +
                    "): try again later");
  queue_.push_back({next_id_, std::move(r)});
  return next_id_++;
}

bool Scheduler::cancel(uint64_t id) {
  if (const auto s = slot_of(id)) {
    release(*s);
    ++counters_.cancelled;
    return true;
  }
  const auto q = std::find_if(queue_.begin(), queue_.end(), [&](const Waiting& w) { return w.id == id; });
  if (q == queue_.end()) return false;
  queue_.erase(q);
  ++counters_.cancelled;
  return true;
}

std::optional<uint32_t> Scheduler::slot_of(uint64_t id) const {
  for (uint32_t s = 0; s < slots_.size(); ++s)
    if (slots_[s] && slots_[s]->id == id) return s;
  return std::nullopt;
}

uint32_t Scheduler::active() const {
  return uint32_t(std::count_if(slots_.begin(), slots_.end(), [](const auto& s) { return s.has_value(); }));
}

// The slot is free at once: the executor's next pass there starts a new sequence at position 0.
void Scheduler::release(uint32_t slot) {
  ex_.end_sequence(slot);
  slots_[slot].reset();
  admitted_.erase(std::find(admitted_.begin(), admitted_.end(), slot));
}

// Queued requests into free slots, oldest first.
void Scheduler::admit() {
  for (uint32_t s = 0; s < slots_.size() && !queue_.empty(); ++s) {
    if (slots_[s]) continue;
    Waiting& w = queue_.front();
    Sampler sampler(w.req.sampling);  // before the request moves
    std::vector<uint32_t> context = w.req.prompt;
    slots_[s].emplace(Running{w.id, std::move(w.req), sampler, 0, 0, 0, std::move(context)});
    queue_.pop_front();
    admitted_.push_back(s);
  }
}

Scheduler::Plan Scheduler::plan() const {
  const uint32_t budget = ex_.max_batch();
  std::vector<uint32_t> decoding;
  for (uint32_t s : admitted_)
    if (slots_[s]->decoding()) decoding.push_back(s);
  std::vector<PassToken> prompt;
  uint32_t used = uint32_t(decoding.size()), rows = used;
  for (uint32_t s : admitted_) {
    const Running& r = *slots_[s];
    const uint32_t n = uint32_t(r.req.prompt.size());
    for (uint32_t p = r.fed; p < n && used < budget; ++p, ++used) {
      prompt.push_back({r.req.prompt[p], s, p, p + 1 == n});
      rows += p + 1 == n;
    }
  }
  const uint32_t max_rows = ex_.max_logit_rows();
  std::vector<std::vector<uint32_t>> drafted = drafts(decoding, std::min(budget - used, max_rows > rows ? max_rows - rows : 0));
  Plan plan;
  for (size_t i = 0; i < decoding.size(); ++i) {
    const uint32_t s = decoding[i];
    const Running& r = *slots_[s];
    plan.tokens.push_back({r.last, s, r.fed, true});
    for (size_t j = 0; j < drafted[i].size(); ++j) plan.tokens.push_back({drafted[i][j], s, r.fed + 1 + uint32_t(j), true});
    plan.rows.push_back({s, r.fed, std::move(drafted[i])});
  }
  for (const PassToken& t : prompt) {
    plan.tokens.push_back(t);
    if (t.logits) plan.rows.push_back({t.seq, t.pos, {}});
  }
  return plan;
}

// Each draft stops where the sequence would: its last pick is the pass's (the one after the draft), so
// a draft holds at most max_tokens - generated - 1 tokens, and positions up to the context's last.
// Over `room`, the drafts are cut to an even share: the largest cap c with sum(min(len, c)) <= room,
// and what that leaves one token each to the longer drafts, in admission order.
std::vector<std::vector<uint32_t>> Scheduler::drafts(std::span<const uint32_t> decoding, uint32_t room) const {
  std::vector<std::vector<uint32_t>> d(decoding.size());
  if (!o_.draft || room == 0) return d;
  size_t longest = 0;
  for (size_t i = 0; i < decoding.size(); ++i) {
    const Running& r = *slots_[decoding[i]];
    LookupOptions lo = *o_.draft;
    lo.k = std::min({lo.k, r.req.max_tokens - r.generated - 1, n_ctx_ - 1 - r.fed});
    d[i] = draft_lookup(r.context, lo);
    longest = std::max(longest, d[i].size());
  }
  auto total = [&](size_t cap) {
    size_t t = 0;
    for (const auto& x : d) t += std::min(x.size(), cap);
    return t;
  };
  size_t cap = 0;
  while (cap < longest && total(cap + 1) <= room) ++cap;
  size_t left = room - total(cap);
  for (auto& x : d) {
    const size_t keep = std::min(x.size(), cap) + (x.size() > cap && left > 0);
    if (x.size() > cap && left > 0) --left;
    x.resize(keep);
  }
  return d;
}

// Before any sequence moves on: a row of NaN/Inf would make greedy pick token 0 forever. The
// scheduler then stands as before the pass (the next pass recomputes those positions).
void Scheduler::check_finite(std::span<const PassToken> pass, std::span<const float> rows, size_t V) {
  size_t row = 0;
  for (const PassToken& t : pass)
    if (t.logits && !all_finite(rows.subspan(row++ * V, V))) throw NonFiniteLogits(t.pos);
}

// The sequence's next token: whether it ends the sequence.
SeqEvent Scheduler::emit(Running& r, uint32_t token) {
  r.last = token;
  r.context.push_back(token);
  ++r.generated;
  ++counters_.generated_tokens;
  const Finish f = r.req.stop_tokens.count(token) ? Finish::stop : r.generated >= r.req.max_tokens ? Finish::length : Finish::none;
  return {r.id, token, f, uint32_t(r.req.prompt.size()), r.generated};
}

std::vector<SeqEvent> Scheduler::step() {
  admit();
  const Plan plan = this->plan();
  if (plan.tokens.empty()) return {};
  const std::span<const float> rows = ex_.pass(plan.tokens);  // a refused pass changes nothing here either
  ++counters_.passes;
  counters_.pass_tokens += plan.tokens.size();
  const size_t V = rows.size() / std::max<size_t>(1, logit_rows(plan.tokens));
  check_finite(plan.tokens, rows, V);
  for (const PassToken& t : plan.tokens) {
    Running& r = *slots_[t.seq];
    if (t.pos < r.req.prompt.size()) ++counters_.prompt_tokens, r.fed = t.pos + 1;
  }
  // Each sequence's rows through its own sampler, in order: a prompt's last row, or a decoding
  // sequence's [last, draft...] rows, of which verify() keeps the agreeing drafts and the pick after
  // them. The cache holds the kept positions; the next pass overwrites the rejected drafts' (rollback).
  std::vector<SeqEvent> events;
  size_t row = 0;
  for (const Rows& w : plan.rows) {
    Running& r = *slots_[w.slot];
    const size_t n = w.draft.size() + 1;
    const Verdict v = verify(w.draft, rows.subspan(row * V, n * V), uint32_t(V), [&](std::span<const float> l) { return r.sampler.pick(l); });
    row += n;
    r.fed = v.next_pos(w.pos);
    counters_.drafted_tokens += w.draft.size();
    // A stop token or max_tokens inside the accepted run ends the sequence there: the rest is dropped.
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      events.push_back(emit(r, v.tokens[i]));
      counters_.accepted_tokens += i < v.accepted;
      if (events.back().finish != Finish::none) break;
    }
  }
  // After the rows are read: a finished sequence's slot is free for the next step's admissions.
  for (const SeqEvent& e : events)
    if (e.finish != Finish::none) {
      release(*slot_of(e.id));
      ++counters_.finished;
    }
  return events;
}

}  // namespace gpunvme::llm
