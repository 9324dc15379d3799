// A greedy pick (issue 36): the token greedy decoding takes from a row of logits, and whether that row
// was all finite (generate() refuses a row holding NaN or Inf: NonFiniteLogits). One rule, computed
// on the host (sampler.h's greedy_pick) or on the GPU (gpu_argmax.h), held equal by
// tests/gpu/test_llm_greedy.cpp:
//   - the id is the lowest index of the largest value (ties: the first; +0 and -0 are a tie);
//   - NaNs are skipped, except that a NaN at index 0 makes the id 0 (sampler.h's argmax, unchanged);
//   - non_finite is 1 when any value is NaN or +-Inf, else 0.
#pragma once
#include <cstdint>

namespace gpunvme::llm {

struct GreedyPick {
  uint32_t id = 0;
  uint32_t non_finite = 0;  // 1: the row holds NaN or Inf (no token may be taken from it)
};

}  // namespace gpunvme::llm
