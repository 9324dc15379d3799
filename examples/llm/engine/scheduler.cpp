#include "examples/llm/engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "examples/llm/engine/generate.h"

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
    slots_[s].emplace(Running{w.id, std::move(w.req), sampler});
    queue_.pop_front();
    admitted_.push_back(s);
  }
}

std::vector<PassToken> Scheduler::plan() {
  std::vector<PassToken> pass;
  const uint32_t budget = ex_.max_batch();
  for (uint32_t s : admitted_)
    if (slots_[s]->decoding()) pass.push_back({slots_[s]->last, s, slots_[s]->fed, true});
  for (uint32_t s : admitted_) {
    const Running& r = *slots_[s];
    const uint32_t n = uint32_t(r.req.prompt.size());
    for (uint32_t p = r.fed; p < n && pass.size() < budget; ++p) pass.push_back({r.req.prompt[p], s, p, p + 1 == n});
  }
  return pass;
}

// Before any sequence moves on: a row of NaN/Inf would make greedy pick token 0 forever. The
// scheduler then stands as before the pass (the next pass recomputes those positions).
void Scheduler::check_finite(std::span<const PassToken> pass, std::span<const float> rows, size_t V) {
  size_t row = 0;
  for (const PassToken& t : pass)
    if (t.logits && !all_finite(rows.subspan(row++ * V, V))) throw NonFiniteLogits(t.pos);
}

// Samples the slot's next token from its own sampler and says whether the sequence ends with it.
SeqEvent Scheduler::take(uint32_t slot, std::span<const float> logits) {
  Running& r = *slots_[slot];
  r.last = r.sampler.pick(logits);
  ++r.generated;
  ++counters_.generated_tokens;
  const Finish f = r.req.stop_tokens.count(r.last) ? Finish::stop : r.generated >= r.req.max_tokens ? Finish::length : Finish::none;
  return {r.id, r.last, f, uint32_t(r.req.prompt.size()), r.generated};
}

std::vector<SeqEvent> Scheduler::step() {
  admit();
  const std::vector<PassToken> pass = plan();
  if (pass.empty()) return {};
  const std::span<const float> rows = ex_.pass(pass);  // a refused pass changes nothing here either
  ++counters_.passes;
  counters_.pass_tokens += pass.size();
  const size_t V = rows.size() / std::max<size_t>(1, logit_rows(pass));
  check_finite(pass, rows, V);
  std::vector<SeqEvent> events;
  for (const PassToken& t : pass) {
    Running& r = *slots_[t.seq];
    counters_.prompt_tokens += t.pos < r.req.prompt.size();
    r.fed = t.pos + 1;
    if (t.logits) events.push_back(take(t.seq, rows.subspan(events.size() * V, V)));
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
