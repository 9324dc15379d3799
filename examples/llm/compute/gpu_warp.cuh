// Warp-level helpers of the engine's kernels (gpu_forward.cu, gpu_matmul.cu): butterfly reductions, and
// one row times a vector by a warp. The batched matrix kernel reproduces warp_dot_row's order of
// additions exactly, so both share these.
#pragma once
#include <cstdint>

#include "examples/llm/quant/dequant.h"

namespace gpunvme::llm::gpu {

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// One row times x by a warp: lane i takes 32-element groups i, i + 32, ... (dequantized in registers),
// then the lanes' partial sums are added. Every lane returns the dot product.
__device__ inline float warp_dot_row(GgmlType t, const uint8_t* row, uint32_t cols, const float* x, uint32_t lane) {
  float part = 0.0f, g[kGroup];
  for (uint32_t grp = lane; grp < cols / kGroup; grp += 32) {
    dequant_group(t, row, grp, g);
    float s = 0.0f;
    for (int l = 0; l < kGroup; ++l) s += g[l] * x[grp * kGroup + l];
    part += s;
  }
  return warp_sum(part);
}

}  // namespace gpunvme::llm::gpu
