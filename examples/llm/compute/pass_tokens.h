// What a pass carries when it holds several sequences (issue 37): per token its id, its sequence (a
// slot of the KV cache) and its position there, and whether the pass returns its logits; and the
// rules a pass must follow (SeqSlots), written once for every executor that keeps sequences.
//
// A sequence's slot is allocated with the KV cache (n_seqs slots of n_ctx positions each); what a
// slot holds is the number of positions its cache has: a pass may continue a sequence (its first
// token at that length), roll it back (at a position before: the speculative rollback), or start it
// again at 0 (a new sequence in a freed slot), never skip a position, whose cache row would hold
// another sequence's or no value. Attention of a token reads only its own sequence's cache.
#pragma once
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpunvme::llm {

struct PassToken {
  uint32_t id = 0;      // the token
  uint32_t seq = 0;     // its sequence's slot, 0 .. n_seqs - 1
  uint32_t pos = 0;     // its position in that sequence
  bool logits = false;  // the pass returns this token's logits (a row, in the pass's order)
};

// The one-sequence pass (every caller before issue 37): tokens[i] of sequence `seq` at pos0 + i, the
// logits of every token when `all_logits`, else of the last one.
inline std::vector<PassToken> one_sequence(std::span<const uint32_t> tokens, uint32_t pos0, bool all_logits, uint32_t seq = 0) {
  std::vector<PassToken> p(tokens.size());
  for (size_t i = 0; i < p.size(); ++i) p[i] = {tokens[i], seq, pos0 + uint32_t(i), all_logits || i + 1 == p.size()};
  return p;
}

// How many rows of logits a pass returns.
inline uint32_t logit_rows(std::span<const PassToken> pass) {
  uint32_t n = 0;
  for (const PassToken& t : pass) n += t.logits;
  return n;
}

// Throws, naming both counts, when the pass asks for more rows of logits than an executor returns.
inline void check_logit_rows(std::span<const PassToken> pass, uint32_t max_rows) {
  if (logit_rows(pass) > max_rows)
    throw std::runtime_error("logits of " + std::to_string(logit_rows(pass)) + " tokens asked; this executor returns at most " +
                             std::to_string(max_rows));
}

// Throws, naming the slots there are (after `where`), unless slot `seq` is one of `count`.
inline void check_slot(uint32_t seq, uint32_t count, const char* where = "") {
  if (seq >= count)
    throw std::runtime_error(where + std::string("sequence slot ") + std::to_string(seq) + " does not exist: there are " + std::to_string(count) +
                             (count ? " (0.." + std::to_string(count - 1) + "; more need a larger max sequence count)" : ""));
}

// The slots' lengths, and the checks a pass must pass before it touches the cache. Every refusal
// names the token (its index in the pass), the slot and the position, and what would be right.
class SeqSlots {
 public:
  SeqSlots(uint32_t n_seqs, uint32_t n_ctx) : n_ctx_(n_ctx), length_(n_seqs, 0) {
    if (n_seqs == 0) throw std::runtime_error("a KV cache needs at least one sequence slot (max sequences 0)");
  }
  uint32_t count() const { return uint32_t(length_.size()); }
  uint32_t length(uint32_t seq) const { return length_.at(in_range(seq)); }

  // Where the tokens go, alone: 1 .. max_tokens of them (0: no limit), each in a slot that exists at
  // a position inside the context. (A backend's single operations are tested at any positions.)
  void check_places(std::span<const PassToken> pass, uint32_t max_tokens) const {
    if (pass.empty()) throw std::runtime_error("a pass needs at least one token");
    if (max_tokens && pass.size() > max_tokens)
      throw std::runtime_error("a pass of " + std::to_string(pass.size()) + " tokens: this one takes 1.." + std::to_string(max_tokens) +
                               " (split it over passes)");
    for (size_t i = 0; i < pass.size(); ++i) {
      const PassToken& t = pass[i];
      if (t.seq >= count()) check_slot(t.seq, count(), ("token " + std::to_string(i) + " of the pass: ").c_str());
      if (t.pos >= n_ctx_)
        throw std::runtime_error("position " + std::to_string(t.pos) + " is past the context (" + std::to_string(n_ctx_) + " tokens)" +
                                 (count() > 1 ? " in sequence slot " + std::to_string(t.seq) : ""));
    }
  }

  // check_places(), and each sequence's tokens at consecutive positions in the pass's order, the first
  // at most the slot's length: positions before a token are in the cache, or earlier in the pass.
  void check(std::span<const PassToken> pass, uint32_t max_tokens) const {
    check_places(pass, max_tokens);
    std::vector<int64_t> next(count(), -1);  // the position the slot's next token of this pass must have
    for (size_t i = 0; i < pass.size(); ++i) {
      const PassToken& t = pass[i];
      const uint32_t held = length_[t.seq];
      if (next[t.seq] < 0 && t.pos > held)
        throw std::runtime_error("token " + std::to_string(i) + " of the pass is at position " + std::to_string(t.pos) + " of sequence slot " +
                                 std::to_string(t.seq) + ", which holds " +
                                 (held ? std::to_string(held) + " positions: it would skip " + std::to_string(held) + ".." +
                                             std::to_string(t.pos - 1) + " (continue at " + std::to_string(held) + ", or start again at 0)"
                                       : "none: a sequence starts at position 0"));
      if (next[t.seq] >= 0 && t.pos != next[t.seq])
        throw std::runtime_error("token " + std::to_string(i) + " of the pass is at position " + std::to_string(t.pos) + " of sequence slot " +
                                 std::to_string(t.seq) + " after its token at " + std::to_string(next[t.seq] - 1) +
                                 ": a sequence's tokens in a pass are at consecutive positions, in order");
      next[t.seq] = int64_t(t.pos) + 1;
    }
  }

  // After check(): each sequence of the pass now holds the positions up to its last token's (a pass
  // that starts before the slot's length drops the rest: what a rollback or a new sequence wants).
  void commit(std::span<const PassToken> pass) {
    for (const PassToken& t : pass) length_[t.seq] = t.pos + 1;
  }

  // The sequence in `seq` is done: its slot holds nothing, and its next pass must start at 0.
  void free(uint32_t seq) { length_.at(in_range(seq)) = 0; }

 private:
  uint32_t in_range(uint32_t seq) const {
    check_slot(seq, count());
    return seq;
  }
  uint32_t n_ctx_;
  std::vector<uint32_t> length_;
};

}  // namespace gpunvme::llm
