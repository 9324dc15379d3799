// Continuous batching (issue 37): many requests over one Executor's sequence slots. Each step() is
// one pass carrying the next token of every decoding sequence plus prompt chunks of newly admitted
// ones, so every streamed layer is read once for all of them. Requests join as slots free and leave
// at a stop token, at max_tokens or on cancel(), their slot freed at once.
//
// A sequence's tokens are those it gets alone, to the bit: the executor gives each row the bits of
// that token alone, and the scheduler gives each sequence its own positions (from 0 in its slot) and
// its own Sampler, seeded per request, called once per token in order.
//
// It holds min(max_seqs, max_batch) sequences at once, so that every decoding token fits in each
// pass: decoding tokens go first (never starved by prompts), prompt chunks fill the rest.
//
// With lookup drafting (SchedulerOptions::draft), a decoding sequence's segment of the pass is
// [last token, d1..dk], its draft by prompt lookup over its own prompt and tokens (draft.h), with
// logits on every row; its own sampler picks through verify() (speculative.h), so its tokens are
// those it gets without drafts, in fewer passes. Drafts are speculative, so they take only the room
// decoding tokens and prompt chunks leave (tokens of max_batch, rows of max_logit_rows), shared out
// evenly; a draft never reaches past the sequence's max_tokens or the context.
//
// One thread calls it (the server's engine thread): there is no locking inside.
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <vector>

#include "examples/llm/engine/draft.h"
#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/sampler.h"

namespace gpunvme::llm {

struct SeqRequest {
  std::vector<uint32_t> prompt;      // token ids, at least one
  uint32_t max_tokens = 0;           // generated tokens at most, at least 1
  SamplerOptions sampling;           // its own sampler, seeded from sampling.seed
  std::set<uint32_t> stop_tokens;    // ends the sequence (the model's eog: the caller adds them)
};

struct SchedulerOptions {
  uint32_t max_queued = 64;  // requests waiting for a slot at most; submit() beyond throws QueueFull
  // Each decoding sequence's next tokens drafted by prompt lookup and verified in the same pass (off:
  // none). On the GPU executor, k <= 31 keeps a segment on the small passes' kernels (bits as alone).
  std::optional<LookupOptions> draft;
};

// submit() when max_queued requests already wait (a server answers 429).
class QueueFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Finish { none, stop, length };

// A token a step produced for request `id`; finish says whether it was the sequence's last (stop:
// the token is a stop token, which the caller may hide; length: max_tokens reached).
struct SeqEvent {
  uint64_t id = 0;
  uint32_t token = 0;
  Finish finish = Finish::none;
  uint32_t prompt_tokens = 0;  // the request's prompt length
  uint32_t generated = 0;      // tokens generated so far, this one included
};

// What the scheduler has done since it was made (for metrics).
struct SchedulerCounters {
  uint64_t passes = 0;            // executor passes (steps that had work)
  uint64_t pass_tokens = 0;       // tokens those passes carried (tokens per pass: pass_tokens / passes)
  uint64_t prompt_tokens = 0;     // prompt tokens computed
  uint64_t generated_tokens = 0;  // tokens sampled
  uint64_t drafted_tokens = 0;    // drafted tokens the passes verified
  uint64_t accepted_tokens = 0;   // of those, the ones that became the sequence's tokens
  uint64_t finished = 0, cancelled = 0;
};

class Scheduler {
 public:
  // `n_ctx`: the context the executor was made with (each slot holds that many positions).
  Scheduler(Executor& ex, uint32_t n_ctx, SchedulerOptions o = {});

  // Queues the request; it takes a slot at the next step() that finds one free. Returns its id.
  // Throws std::invalid_argument for an empty prompt, max_tokens 0, prompt + max_tokens beyond the
  // context, a NaN/Inf or negative temperature or a NaN/negative top_p; QueueFull when max_queued
  // requests wait.
  uint64_t submit(SeqRequest r);
  // Frees the request's slot at once, or drops it from the queue; false for an unknown or finished id.
  bool cancel(uint64_t id);
  // One pass (none when idle: returns no events); an event per token produced, a sequence's in order
  // (several for one whose drafts were accepted; none after its last).
  // Throws what the executor throws, and NonFiniteLogits (generate.h) for a row of NaN/Inf (a broken
  // model: fatal to the engine, as in generate()).
  std::vector<SeqEvent> step();

  uint32_t active() const;                           // sequences holding a slot
  uint32_t queued() const { return uint32_t(queue_.size()); }
  bool idle() const { return active() == 0 && queue_.empty(); }
  const SchedulerCounters& counters() const { return counters_; }

 private:
  struct Waiting {
    uint64_t id;
    SeqRequest req;
  };
  struct Running {
    uint64_t id;
    SeqRequest req;
    Sampler sampler;
    uint32_t fed = 0;                // positions in its slot (prompt, then generated tokens fed back)
    uint32_t generated = 0;
    uint32_t last = 0;               // the last token sampled, fed in the next pass
    std::vector<uint32_t> context;   // the prompt and the tokens generated (what drafts are looked up in)
    bool decoding() const { return fed >= req.prompt.size(); }
  };
  // A sequence's rows of logits in a pass: a decoding sequence's [last, draft...], or a prompt's last token.
  struct Rows {
    uint32_t slot = 0;
    uint32_t pos = 0;              // the position of its first row's token
    std::vector<uint32_t> draft;   // the tokens drafted after it, verified against the rows
  };
  struct Plan {
    std::vector<PassToken> tokens;
    std::vector<Rows> rows;        // in the pass's row order
  };

  void admit();
  // The pass: decoding tokens first (never starved), then prompt chunks in admission order, then drafts
  // in what is left.
  Plan plan() const;
  // The decoding sequences' drafts, at most `room` tokens in all.
  std::vector<std::vector<uint32_t>> drafts(std::span<const uint32_t> decoding, uint32_t room) const;
  static void check_finite(std::span<const PassToken> pass, std::span<const float> rows, size_t V);
  SeqEvent emit(Running& r, uint32_t token);
  void release(uint32_t slot);
  std::optional<uint32_t> slot_of(uint64_t id) const;  // the slot running request `id`

  Executor& ex_;
  uint32_t n_ctx_;
  SchedulerOptions o_;
  uint64_t next_id_ = 1;
  std::deque<Waiting> queue_;
  std::vector<std::optional<Running>> slots_;
  std::vector<uint32_t> admitted_;  // occupied slots in admission order (prompt chunks' order)
  SchedulerCounters counters_;
};

}  // namespace gpunvme::llm
