// Warp-level helpers of the engine's kernels (gpu_forward.cu, gpu_matmul.cu): butterfly reductions, and
// one row times a vector by a warp. The batched matrix kernel reproduces warp_dot_row's order of
// additions exactly, so both share these.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

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

// The matrix kernels take the weight type as a template argument: with the type known only at run
// time, dequant_group's dispatch stayed in the kernel and the 32 floats of a group went through a
// 128-byte stack frame (a local-memory store and load per weight), which made the batched kernel
// load-bound. Host code picks the instantiation with with_weight_type (quant/weight_types.h: its cases
// are the weight-type table's rows).
using llm::WeightType;
using llm::with_weight_type;

// One row times x by a warp: lane i takes 32-element groups i, i + 32, ... (dequantized in registers),
// then the lanes' partial sums are added. Every lane returns the dot product. x must be 16-byte aligned
// (the callers check): a lane reads its group of x as 8 float4s, not 32 floats one by one (a warp's
// scalar load touched 32 cache lines; the kernel was load-bound at a tenth of the GPU's memory
// bandwidth). The additions stay in the order l = 0, 1, ..., 31, which the batched kernel repeats.
template <GgmlType T>
__device__ inline float warp_dot_row(const uint8_t* row, uint32_t cols, const float* x, uint32_t lane) {
  float part = 0.0f, g[kGroup];
  for (uint32_t grp = lane; grp < cols / kGroup; grp += 32) {
    dequant_group<T>(row, grp, g);
    const float4* xg = reinterpret_cast<const float4*>(x + grp * kGroup);
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < kGroup / 4; ++q) {
      const float4 v = xg[q];
      s += g[4 * q] * v.x;
      s += g[4 * q + 1] * v.y;
      s += g[4 * q + 2] * v.z;
      s += g[4 * q + 3] * v.w;
    }
    part += s;
  }
  return warp_sum(part);
}

// The staged kernels' x in shared memory (gpu_rows.cuh) and a group's sums against it.
// x's float4 (group, q) at shared float4 8 * group + (q ^ (group % 8)): eight consecutive lanes read
// eight consecutive groups' q-th float4s, which land in eight different 16-byte bank groups.
__device__ inline uint32_t staged_index(uint32_t group, uint32_t q) { return 8 * group + (q ^ (group & 7)); }

// Group `grp` of the staged x into registers.
__device__ inline void staged_group(const float4* xs, uint32_t grp, float4 (&xv)[kGroup / 4]) {
#pragma unroll
  for (int q = 0; q < kGroup / 4; ++q) xv[q] = xs[staged_index(grp, q)];
}

// One group's 32 products, added in the order l = 0, 1, ..., 31 (warp_dot_row's order).
__device__ inline float group_dot(const float (&g)[kGroup], const float4 (&xv)[kGroup / 4]) {
  float s = 0.0f;
#pragma unroll
  for (int q = 0; q < kGroup / 4; ++q) {
    s += g[4 * q] * xv[q].x;
    s += g[4 * q + 1] * xv[q].y;
    s += g[4 * q + 2] * xv[q].z;
    s += g[4 * q + 3] * xv[q].w;
  }
  return s;
}

// The float4 loads of warp_dot_row need it; a host-side check with an error that names the caller.
inline void check_vector_alignment(const void* x, const char* who) {
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0)
    throw std::invalid_argument(std::string(who) + ": the input vector is not 16-byte aligned");
}

}  // namespace gpunvme::llm::gpu
