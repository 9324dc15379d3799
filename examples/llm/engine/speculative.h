// Speculative verification: what one pass over [current token, draft...] keeps. The pass ran the
// current token (not yet in the KV cache) at position pos and the drafted tokens d1..dk at pos+1..pos+k
// and returned one row of logits per position; row i is what a single-token pass at pos+i would have
// returned had the tokens before it been the same (the batched forward pass is bitwise equal to the
// single-token one, tests/llm/test_batched.cpp). Decoding would pick y0 from row 0; while y_i equals
// d_(i+1), the next position's row is valid too, so the picks go on. The first pick that differs from
// the draft (or the pick from the last row) ends the pass. The picks are made through the caller's
// sampler, row by row, in the order plain decoding makes them: greedy or seeded sampling give the
// very tokens plain decoding gives, only in fewer passes.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace gpunvme::llm {

struct Verdict {
  uint32_t accepted = 0;         // drafted tokens kept (a): d1..da
  std::vector<uint32_t> tokens;  // the pass's output, a + 1 tokens: d1..da, then the pick after them
  // The cache holds valid entries up to position pos + a (the current token and d1..da); the entries of
  // the rejected drafts (pos+a+1 .. pos+k) are stale and are overwritten by the next pass, which starts
  // at pos + a + 1 with the last of `tokens` as its current token.
  uint32_t next_pos(uint32_t pos) const { return pos + accepted + 1; }
};

// `rows` holds draft.size() + 1 rows of n_vocab logits; `pick` chooses a token from one row.
Verdict verify(std::span<const uint32_t> draft, std::span<const float> rows, uint32_t n_vocab,
               const std::function<uint32_t(std::span<const float>)>& pick);

}  // namespace gpunvme::llm
