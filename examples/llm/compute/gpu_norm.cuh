// The RMS norm's scale of a vector, computed by a whole block: what the norm kernel (gpu_forward.cu's
// rms_norm_kernel) multiplies each element by, and what a matrix-vector kernel that normalizes its input
// while staging it (gpu_rows.cuh's block_rows, issue 36: one launch fewer per layer) computes in each of
// its blocks. One function, so both give the same bits: each thread adds the squares of its elements i,
// i + blockDim.x, ... in order in double precision (each square exact), the warps' sums by the
// butterfly, then the warps' in order; the block must have the same number of threads in both.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "examples/llm/compute/gpu_warp.cuh"

namespace gpunvme::llm::gpu {

inline constexpr uint32_t kNormThreads = 256;  // threads of every block that computes a norm's scale

// Elements a thread loads before it uses the first: its loop was one load after another (a dependent
// sum, and `out` may be `x`, so no load could move above the previous store), 16 memory latencies in a
// row for a 4096-wide vector: 16 us of every Mixtral-8x7B norm alone. The sums are the same, in the same order.
inline constexpr uint32_t kNormAhead = 8;

// 1 / sqrt(mean(x^2) + eps) over x[0, n), in every thread of a block of kNormThreads threads.
// `partial`: kNormThreads / 32 doubles of shared memory. Ends after a barrier.
__device__ inline float rms_scale(const float* x, uint32_t n, float eps, double* partial) {
  const uint32_t step = blockDim.x, span = kNormAhead * step;
  double ss = 0.0;
  uint32_t i = threadIdx.x;
  for (; i + span - step < n; i += span) {
    float v[kNormAhead];
#pragma unroll
    for (uint32_t j = 0; j < kNormAhead; ++j) v[j] = x[i + j * step];
#pragma unroll
    for (uint32_t j = 0; j < kNormAhead; ++j) ss += double(v[j]) * v[j];
  }
  for (; i < n; i += step) ss += double(x[i]) * x[i];
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  double total = 0.0;
  for (uint32_t p = 0; p < blockDim.x / 32; ++p) total += partial[p];
  return 1.0f / sqrtf(float(total / n) + eps);
}

// x += y's RMS norm times w over [0, n) by a whole block of kNormThreads threads (a post-norm and the
// residual add: gpu_forward.cu's norm_add_kernel, and the last block of gpu_matmul.cu's product that ends
// in them). The scale is rms_scale's, each element y * scale * w as the norm kernel computes it, and
// x + that as the add kernel does: the product is rounded before the sum (__fmul_rn, __fadd_rn are never
// contracted into an FMA), as when the norm kernel stored it and the add kernel read it back, so the
// bits are those two kernels'. y is only read (x and y must not overlap).
__device__ inline void norm_add_block(float* x, const float* y, const float* w, uint32_t n, float eps) {
  __shared__ double partial[kNormThreads / 32];
  const float scale = rms_scale(y, n, eps, partial);
  const uint32_t step = blockDim.x, span = kNormAhead * step;
  uint32_t i = threadIdx.x;
  for (; i + span - step < n; i += span) {  // kNormAhead elements' loads before their arithmetic (kNormAhead's why)
    float v[kNormAhead], g[kNormAhead], a[kNormAhead];
#pragma unroll
    for (uint32_t j = 0; j < kNormAhead; ++j) v[j] = y[i + j * step], g[j] = w[i + j * step], a[j] = x[i + j * step];
#pragma unroll
    for (uint32_t j = 0; j < kNormAhead; ++j) x[i + j * step] = __fadd_rn(a[j], __fmul_rn(__fmul_rn(v[j], scale), g[j]));
  }
  for (; i < n; i += step) x[i] = __fadd_rn(x[i], __fmul_rn(__fmul_rn(y[i], scale), w[i]));
}

}  // namespace gpunvme::llm::gpu
