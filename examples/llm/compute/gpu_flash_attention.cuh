// Attention for passes of many tokens (issue 36: long prompts), flash-attention style: no score matrix in
// memory. gpu_forward.cu's attention_kernel writes every (token, head)'s scores over the whole context to
// a buffer (n x heads x n_ctx floats: 1 GiB for a 512-token pass of a 64-head model at 8192 positions)
// and reads each K row with one thread; here a block takes kFlashQueries queries of one head, stages
// the cache's K and V rows kFlashTile positions at a time in shared memory (FP32), and each warp keeps
// its queries' running maximum, sum and weighted V in registers (the online softmax): one pass over the
// positions, causal and windowed per query, the sink joining the maximum and the sum at the end as ops.h
// says. CUDA cores, FP32 arithmetic: the scores are the same dot products as attention_kernel's, but
// the softmax is accumulated in another order, so the last bits differ; gpu_forward.cu runs it only for
// passes of more than kSmallPassTokens tokens (the small passes keep their bits). Heads of 64, 128 and
// 256 dimensions go to the tensor cores instead (gpu_flash_mma.cu, through flash_attention below): this
// kernel is the fallback for other widths.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "examples/llm/compute/gpu_flash_mma.h"
#include "examples/llm/compute/gpu_rows.cuh"
#include "examples/llm/compute/gpu_warp.cuh"
#include "examples/llm/compute/ops.h"

namespace gpunvme::llm::gpu {

inline constexpr uint32_t kFlashTile = 32;         // positions staged per step: one per lane
inline constexpr uint32_t kFlashWarps = 8;         // warps per block: 32 queries share each staged tile
inline constexpr uint32_t kFlashPerWarp = 4;       // queries per warp
inline constexpr uint32_t kFlashQueries = kFlashWarps * kFlashPerWarp;
inline constexpr uint32_t kFlashMaxDims = 8;       // head dimensions per lane: heads of up to 256
inline constexpr uint32_t kFlashMaxHeadDim = 32 * kFlashMaxDims;

// Shared bytes of a block: K rows padded by one float (lane j reads row j: conflict-free), V rows, queries.
inline uint32_t flash_shared_bytes(uint32_t head_dim) {
  return uint32_t(sizeof(float)) * (kFlashTile * (head_dim + 1) + kFlashTile * head_dim + kFlashQueries * head_dim);
}

// Block (h, b): query head h, tokens b * kFlashQueries .. + kFlashQueries of the pass (at pos0 + token).
__global__ void __launch_bounds__(kFlashWarps * 32)
    flash_attention_kernel(const float* q, const __half* kc, const __half* vc, uint32_t kv_dim, uint32_t head_dim,
                           uint32_t group, uint32_t window, uint32_t pos0, uint32_t n, float scale, const float* sinks,
                           float* out) {
  extern __shared__ float sm[];
  float* ks = sm;                                   // [kFlashTile][head_dim + 1]
  float* vs = ks + kFlashTile * (head_dim + 1);     // [kFlashTile][head_dim]
  float* qs = vs + kFlashTile * head_dim;           // [kFlashQueries][head_dim]
  const uint32_t h = blockIdx.x, heads = gridDim.x, kvh = h / group, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t t0 = blockIdx.y * kFlashQueries, tq = min(kFlashQueries, n - t0);
  auto first_of = [&](uint32_t pos) { return window && pos + 1 > window ? pos + 1 - window : 0u; };
  for (uint32_t i = threadIdx.x; i < tq * head_dim; i += blockDim.x)
    qs[i] = q[(uint64_t(t0 + i / head_dim) * heads + h) * head_dim + i % head_dim];
  float m[kFlashPerWarp], l[kFlashPerWarp], acc[kFlashPerWarp][kFlashMaxDims];
#pragma unroll
  for (uint32_t a = 0; a < kFlashPerWarp; ++a) {
    m[a] = -INFINITY, l[a] = 0.0f;
#pragma unroll
    for (uint32_t i = 0; i < kFlashMaxDims; ++i) acc[a][i] = 0.0f;
  }
  const uint32_t lo = first_of(pos0 + t0), hi = pos0 + t0 + tq - 1;  // the block's positions (first is monotonic)
  for (uint32_t p0 = lo; p0 <= hi; p0 += kFlashTile) {
    const uint32_t tile = min(kFlashTile, hi + 1 - p0);
    __syncthreads();  // the previous tile (and, the first time, nothing) is read
    for (uint32_t i = threadIdx.x; i < tile * head_dim; i += blockDim.x) {
      const uint32_t j = i / head_dim, d = i % head_dim;
      const uint64_t at = uint64_t(p0 + j) * kv_dim + uint64_t(kvh) * head_dim + d;
      ks[j * (head_dim + 1) + d] = __half2float(kc[at]);
      vs[j * head_dim + d] = __half2float(vc[at]);
    }
    __syncthreads();
#pragma unroll
    for (uint32_t a = 0; a < kFlashPerWarp; ++a) {
      const uint32_t qi = warp * kFlashPerWarp + a;
      if (qi >= tq) break;  // warp-uniform
      const uint32_t pos = pos0 + t0 + qi, p = p0 + lane;
      const bool seen = lane < tile && p >= first_of(pos) && p <= pos;
      float s = -INFINITY;
      if (seen) {
        const float* qv = qs + qi * head_dim;
        const float* kv = ks + lane * (head_dim + 1);
        float dot = 0.0f;
        for (uint32_t d = 0; d < head_dim; ++d) dot += qv[d] * kv[d];
        s = dot * scale;
      }
      const float mt = warp_max(s);
      if (mt == -INFINITY) continue;  // no position of this tile is seen by this query (warp-uniform)
      const float mn = fmaxf(m[a], mt), corr = expf(m[a] - mn);  // m = -inf at first: corr 0
      const float pj = seen ? expf(s - mn) : 0.0f;
      l[a] = l[a] * corr + warp_sum(pj);
#pragma unroll
      for (uint32_t i = 0; i < kFlashMaxDims; ++i) acc[a][i] *= corr;
      for (uint32_t j = 0; j < tile; ++j) {
        const float w = __shfl_sync(0xffffffffu, pj, j);
        const float* vr = vs + j * head_dim;
#pragma unroll
        for (uint32_t i = 0; i < kFlashMaxDims; ++i)
          if (lane + 32 * i < head_dim) acc[a][i] += w * vr[lane + 32 * i];
      }
      m[a] = mn;
    }
  }
#pragma unroll
  for (uint32_t a = 0; a < kFlashPerWarp; ++a) {
    const uint32_t qi = warp * kFlashPerWarp + a;
    if (qi >= tq) break;
    const float sink = sinks ? sinks[h] : -INFINITY;
    const float mf = with_sink_max(m[a], sink), corr = expf(m[a] - mf);
    const float sum = with_sink_sum(l[a] * corr, sink, mf);
    float* o = out + (uint64_t(t0 + qi) * heads + h) * head_dim;
#pragma unroll
    for (uint32_t i = 0; i < kFlashMaxDims; ++i)
      if (lane + 32 * i < head_dim) o[lane + 32 * i] = acc[a][i] * corr / sum;
  }
}

// Enqueues the kernel for n tokens at pos0 (heads x ceil(n / kFlashQueries) blocks). head_dim at most
// kFlashMaxHeadDim (the caller keeps attention_kernel for wider heads).
inline void flash_attention(cudaStream_t s, const float* q, const __half* kc, const __half* vc, uint32_t kv_dim,
                            uint32_t head_dim, uint32_t heads, uint32_t group, uint32_t window, uint32_t pos0, uint32_t n,
                            float scale, const float* sinks, float* out) {
  if (flash_mma_takes(head_dim))  // heads of 64, 128, 256 on the tensor cores (gpu_flash_mma.cu); other widths here
    return flash_attention_mma(s, q, kc, vc, kv_dim, head_dim, heads, group, window, pos0, n, scale, sinks, out);
  allow_staged_shared<flash_attention_kernel>();  // above 48 KB for heads wider than 96
  flash_attention_kernel<<<dim3(heads, (n + kFlashQueries - 1) / kFlashQueries), kFlashWarps * 32, flash_shared_bytes(head_dim),
                           s>>>(q, kc, vc, kv_dim, head_dim, group, window, pos0, n, scale, sinks, out);
}

}  // namespace gpunvme::llm::gpu
