// Q4_K's lean loop for passes of several tokens (issue 36; gpu_rows_q8_batch.cuh's matmul_q8_kernel takes
// it where the rows are 16-byte aligned): the one-token lean loop's steps (gpu_rows_q4k_q8.cuh) for every
// token of a tile, so that each (row, token) has the bits of warp_dot_rows_q8 for that token alone.
//
// Why: the tile's Q4_K loop read a row's header and slice by load_words (an alignment branch at every
// load) and only then computed, so no load was in flight during a step's sums of up to 8 tokens, and each
// token decoded the slice's scales and mins and converted d and dmin again: 8 tokens of Llama-3-8B Q4_K
// took 20.9 ms a pass against 19.6 with the FP32 kernels. Here a slice's bytes are decoded once for the
// tile's tokens (q4k_q8_weights, the lean loop's fixed shifts), and the warp walks its rows' steps as one
// list, the next step's plain 16-byte loads issued before this step's sums, across a row's end too (a
// warp's row of a 4096-wide matrix is only 4 steps). Measured (session 28, call C, tree 95f80c8, H200,
// `llm_pass_compute --shape llama3-8b --type q4_k`, ms a pass for 2/4/8/32 tokens; FP32 8.6/12.1/19.6/69.9,
// the old tile 7.5/11.4/20.9/62.6): this loop at 2 blocks an SM (115 registers) 6.6/8.9/13.6/32.4, at 3
// (80, spilling 40 bytes) 7.2/9.7/15.0/35.3, at 4 (64) 7.6/10.8/17.7/40.8; at 3 with 512-thread blocks
// where one 256-thread block fills an SM's shared memory (the 14336-wide down projection's 8 vectors,
// 129 KB) 7.1/9.8/13.6/30.2; at 3 with x's slice sums computed once a tile (8 dp4a fewer a token and
// step, 4 bytes more a group) 7.2/10.0/15.3/36.2, not kept. Kept: 2 blocks an SM, and 512-thread blocks
// where they hold more warps an SM than 256-thread ones (launch_matmul_q8).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "examples/llm/compute/gpu_rows_q8.cuh"  // its end includes gpu_rows_q4k_q8.cuh (Q4kQ8Lane)

namespace gpunvme::llm::gpu {

// Lane c's slice of a super-block with what q4k_q8_lean_dot computes from the weights alone: the quants'
// low and high nibbles, the two sub-blocks' scales and mins, d and dmin.
struct Q4kQ8Weights {
  uint32_t lo[4], hi[4];
  int32_t sclo, schi, mlo, mhi;
  float d, dmin;
};

__device__ inline Q4kQ8Weights q4k_q8_weights(const uint4& head, const uint4& q, const Q4kQ8Lane& c) {
  Q4kQ8Weights w;
  const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) w.lo[k] = qw[k] & 0x0F0F0F0Fu, w.hi[k] = (qw[k] >> 4) & 0x0F0F0F0Fu;
  const uint32_t a = head.y >> c.shift, m4 = head.z >> c.shift, h = head.w >> c.shift;
  const uint32_t sc = c.high ? (h & 0x0F0Fu) | ((a >> 2) & 0x3030u) : a & 0x3F3Fu;
  const uint32_t m = c.high ? ((h >> 4) & 0x0F0Fu) | ((m4 >> 2) & 0x3030u) : m4 & 0x3F3Fu;
  w.sclo = int32_t(sc & 0xFFu), w.schi = int32_t(sc >> 8), w.mlo = int32_t(m & 0xFFu), w.mhi = int32_t(m >> 8);
  if (half2_nan_mask(head.x) == 0) {
    w.d = finite_half_to_float(head.x & 0xFFFFu);
    w.dmin = finite_half_to_float(head.x >> 16);
  } else {
    w.d = half_to_float(uint16_t(head.x & 0xFFFFu));
    w.dmin = half_to_float(uint16_t(head.x >> 16));
  }
  return w;
}

// q4k_q8_lean_dot's value for the decoded slice: the same integers, then q4k_slice_sum.
__device__ inline float q4k_q8_weights_dot(const Q4kQ8Weights& w, const Q8Slice& x) {
  int32_t dlo = 0, dhi = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) dlo = dot4_i8(w.lo[k], x.lo[k], dlo), dhi = dot4_i8(w.hi[k], x.hi[k], dhi);
  return q4k_slice_sum(dlo, dhi, w.sclo, w.schi, w.mlo, w.mhi, w.d, w.dmin, x);
}

// x's side of slice s of super-block b from a staged vector t: staged_slice's values, d of both blocks
// in one 8-byte load.
__device__ inline Q8Slice tile_slice(const uint8_t* t, uint32_t groups, uint32_t b, uint32_t s) {
  const uint32_t e = 8 * b + s;
  const uint4 l = reinterpret_cast<const uint4*>(t)[e], h = reinterpret_cast<const uint4*>(t + 16 * uint64_t(groups))[e];
  const float2 d = reinterpret_cast<const float2*>(t + 32 * uint64_t(groups))[4 * b + s / 2];
  Q8Slice x{{l.x, l.y, l.z, l.w}, {h.x, h.y, h.z, h.w}, d.x, d.y, 0, 0};
  q8_slice_sums(x);
  return x;
}

// The block's warps over `rows` 16-byte aligned Q4_K rows (w, row_bytes apart) times the m (<= kTokens)
// staged vectors at sm + j * stride: y[j * rows + r] = (row r . vector j) + (bias[r] or 0), each with
// warp_dot_rows_q8's bits for that vector alone (lane l: slice l % 8 of super-blocks l / 8, l / 8 + 4, ...
// in order, then the butterfly). Warp rows as matmul_q8_kernel deals them; a row's step k is super-block
// l / 8 + 4k, every lane taking the row's ceil(blocks / 4) steps, adding nothing past the row's end.
template <uint32_t kTokens>
__device__ inline void q4k_tokens_lean(const uint8_t* w, uint64_t row_bytes, uint32_t rows, uint32_t groups, const uint8_t* sm,
                                       uint64_t stride, uint32_t m, const float* bias, float* y) {
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const uint32_t blocks = groups / 8, steps = (blocks + 3) / 4, rstep = gridDim.x * warps;
  const Q4kQ8Lane c(lane);
  auto load = [&](uint32_t r, uint32_t b, uint4& h, uint4& q) {
    const uint4* blk = reinterpret_cast<const uint4*>(w + uint64_t(r) * row_bytes + uint64_t(b) * sizeof(BlockQ4_K));
    h = blk[0];
    q = blk[1 + c.s];
  };
  uint32_t r = warp * gridDim.x + blockIdx.x, k = 0;
  if (r >= rows) return;
  float part[kTokens];
#pragma unroll
  for (uint32_t j = 0; j < kTokens; ++j) part[j] = 0.0f;
  uint4 head, q;
  if (lane / 8 < blocks) load(r, lane / 8, head, q);
  for (;;) {
    const bool end = k + 1 == steps;  // this step is the row's last
    const uint32_t rn = end ? r + rstep : r, kn = end ? 0 : k + 1, b = lane / 8 + 4 * k, bn = lane / 8 + 4 * kn;
    const bool more = rn < rows && bn < blocks;
    uint4 hn, qn;  // the next step's bytes, in flight during this step's sums
    if (more) load(rn, bn, hn, qn);
    if (b < blocks) {
      const Q4kQ8Weights wt = q4k_q8_weights(head, q, c);
#pragma unroll
      for (uint32_t j = 0; j < kTokens; ++j)
        if (j < m) part[j] += q4k_q8_weights_dot(wt, tile_slice(sm + j * stride, groups, b, c.s));
    }
    if (end) {
      float dot[kTokens];
#pragma unroll
      for (uint32_t j = 0; j < kTokens; ++j)
        if (j < m) dot[j] = warp_sum(part[j]), part[j] = 0.0f;  // m is the same for the whole warp
      if (lane == 0) {
        const float add = bias ? bias[r] : 0.0f;  // MatrixRows's expression: dot + (bias or 0)
#pragma unroll
        for (uint32_t j = 0; j < kTokens; ++j)
          if (j < m) y[uint64_t(j) * rows + r] = dot[j] + add;
      }
      if (rn >= rows) return;
    }
    r = rn, k = kn;
    if (more) head = hn, q = qn;
  }
}

}  // namespace gpunvme::llm::gpu
