// A matrix row times many vectors at once, for batched passes (the prompt in chunks, speculative
// verification): each 32-weight group is dequantized once and applied to every vector of the batch,
// so one read of a layer serves many tokens. Per (row, vector) the sums run in dot_row's order (ops.h),
// so every result has exactly dot_row's bits: a batch of n gives what n single-token steps give.
#pragma once
#include <cstdint>

#include "examples/llm/compute/ops.h"

namespace gpunvme::llm {

// y[t * ldy] = row . x[t * ldx .. + cols) for t < n. `part` is scratch of n floats.
inline void dot_row_batch(GgmlType type, const void* row, uint64_t cols, const float* x, uint64_t ldx, uint32_t n,
                          float* part, float* y, uint64_t ldy) {
  for (uint32_t t = 0; t < n; ++t) part[t] = 0.0f;
  float w[kGroup];
  for (uint64_t g = 0; g < cols / kGroup; ++g) {
    dequant_group(type, row, g, w);
    const float* xg = x + g * kGroup;
    for (uint32_t t = 0; t < n; ++t, xg += ldx) {
      float s = 0.0f;
      for (int l = 0; l < kGroup; ++l) s += w[l] * xg[l];
      part[t] += s;
    }
  }
  for (uint32_t t = 0; t < n; ++t) y[t * ldy] = part[t];
}

}  // namespace gpunvme::llm
