// Drafting tokens for speculative verification without a second model: prompt lookup. Text often
// repeats itself (names, code identifiers, list items, a quoted passage): when the last few tokens of
// the context occurred before, the tokens that followed them then are a good guess for what follows
// now. The guess costs nothing to make; a wrong one costs only the extra positions of one pass
// (speculative.h decides what is kept).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace gpunvme::llm {

struct LookupOptions {
  uint32_t k = 8;          // tokens to draft at most
  uint32_t max_ngram = 3;  // the longest context suffix tried first ...
  uint32_t min_ngram = 1;  // ... down to this many tokens
};

// Up to o.k tokens to follow `context`: for n = max_ngram down to min_ngram, the last n tokens of the
// context are looked for earlier in it; at the most recent earlier occurrence, the tokens after it
// (at most k, fewer where the context ends) are the draft. Empty when no such n-gram recurs.
std::vector<uint32_t> draft_lookup(std::span<const uint32_t> context, const LookupOptions& o);

}  // namespace gpunvme::llm
