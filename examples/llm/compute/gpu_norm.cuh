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

}  // namespace gpunvme::llm::gpu
