// Q4_K's lean loop of the 8-bit-x products (issue 36; included at the end of gpu_rows_q8.cuh, whose
// warp_dot_rows_q8 takes it for 16-byte aligned Q4_K rows in every 8-bit kernel): gpu_rows_q8.cuh's Q4_K
// arithmetic, lane for lane and operation for operation (so quant/q8_dot.h's q4k_row_dot_q8 is still its
// CPU twin, bit for bit), with fewer instructions and the next super-blocks' loads in flight.
//
// Why: the Q4_K loop of warp_dot_rows_q8 (Llama-3-8B Q4_K's products 3.511 ms a token on an H200 with it,
// 2.947 with the FP32 kernels: 8-bit x was slower) loads each header and slice by load_words, which tests
// the address's alignment at every load and carries its 4-byte and funnel-shift fallbacks (the lean FP32
// loop's finding, gpu_rows_lean.cuh): each load sits in its own branch, so the compiler cannot issue the
// next super-blocks' loads before this one's arithmetic. It also decodes the slice's 6-bit scales and
// mins through scale_min_k4's byte picks on every slice and row. Here a row set whose rows are 16-byte
// aligned (tested once a set) loads header and slice as plain 16-byte loads, the next step's (4
// super-blocks on) for all R rows before this step's sums; the lane's scale and min bytes come from the
// header words by shifts fixed per lane (both of its sub-blocks at once); d and dmin convert by one
// instruction each unless one is a NaN. Rows that are not 16-byte aligned keep warp_dot_rows_q8's loop.
// Measured (session 27, call 3, tree 3e9b666, H200, the same run's FP32 2.968 ms): 2.207 ms of products
// (graph 2.590 ms a token). Measured slower in the same call, so not kept: x's sums once a block after
// staging instead of per slice (2.219), two steps ahead (2.321), 3 blocks an SM (85 registers: 2.238),
// both (2.687).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "examples/llm/compute/gpu_rows_lean.cuh"
#include "examples/llm/compute/gpu_rows_q8.cuh"  // included by it at its end: the parts used here are above

namespace gpunvme::llm::gpu {

// A lane's fixed place in every super-block: slice s = lane % 8, whose sub-blocks j = 2 (s / 2) and j + 1
// have their scale_min_k4 bytes at byte j % 4 and the next of the header's scale words (bytes 4..7 in
// head.y, 8..11 in head.z, 12..15 in head.w), 6-bit fields for j < 4, split nibble + 2 bits above.
struct Q4kQ8Lane {
  uint32_t s, shift;
  bool high;
  __device__ explicit Q4kQ8Lane(uint32_t lane) : s(lane % 8), shift(16 * ((lane % 8) / 2 % 2)), high(lane % 8 >= 4) {}
};

// q4k_slice_dot's value from the 16-byte header and slice words: the same integers (the dot products
// exact in any order, scale_min_k4's bytes), then its float tail (q4k_slice_sum).
__device__ inline float q4k_q8_lean_dot(const uint4& head, const uint4& q, const Q8Slice& x, const Q4kQ8Lane& c) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
  int32_t dlo = 0, dhi = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    dlo = dot4_i8(w[k] & 0x0F0F0F0Fu, x.lo[k], dlo);
    dhi = dot4_i8((w[k] >> 4) & 0x0F0F0F0Fu, x.hi[k], dhi);
  }
  // Both sub-blocks' bytes at once: byte 0 of each pair is sub-block j's, byte 1 is j + 1's.
  const uint32_t a = head.y >> c.shift, m4 = head.z >> c.shift, h = head.w >> c.shift;
  const uint32_t sc = c.high ? (h & 0x0F0Fu) | ((a >> 2) & 0x3030u) : a & 0x3F3Fu;
  const uint32_t m = c.high ? ((h >> 4) & 0x0F0Fu) | ((m4 >> 2) & 0x3030u) : m4 & 0x3F3Fu;
  float d, dmin;
  if (half2_nan_mask(head.x) == 0) {
    d = finite_half_to_float(head.x & 0xFFFFu);
    dmin = finite_half_to_float(head.x >> 16);
  } else {
    d = half_to_float(uint16_t(head.x & 0xFFFFu));
    dmin = half_to_float(uint16_t(head.x >> 16));
  }
  return q4k_slice_sum(dlo, dhi, int32_t(sc & 0xFFu), int32_t(sc >> 8), int32_t(m & 0xFFu), int32_t(m >> 8), d, dmin, x);
}

// R 16-byte aligned Q4_K rows times staged 8-bit x by one warp, q4k_row_dot_q8's order (lane l: slice
// l % 8 of super-blocks l / 8, l / 8 + 4, ... in order, then the butterfly); out[r] in every lane. X: one
// staged x for every row (kRowX false: sm[0], its slice read once a step), or row r's own at sm[r] (the
// fused MoE's down rows, one per routed expert: their loads in flight together, each row's sums the same).
template <uint32_t R, bool kRowX>
__device__ inline void warp_dot_rows_q4k_q8_lean_x(const uint8_t* const (&row)[R], uint32_t groups,
                                                   const uint8_t* const (&sm)[kRowX ? R : 1], uint32_t lane, float (&out)[R]) {
  const Q4kQ8Lane c(lane);
  const uint32_t blocks = groups / 8;
  float part[R];
  uint4 head[R], q[R];
  auto load = [&](uint32_t b, uint4 (&h)[R], uint4 (&w)[R]) {
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) {
      const uint4* blk = reinterpret_cast<const uint4*>(row[r] + uint64_t(b) * sizeof(BlockQ4_K));
      h[r] = blk[0];
      w[r] = blk[1 + c.s];
    }
  };
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) part[r] = 0.0f;
  if constexpr (kRowX) {  // R rows' loads in flight already: no next step's beside them (registers: 2 blocks an SM)
    for (uint32_t b = lane / 8; b < blocks; b += 4) {
      load(b, head, q);
#pragma unroll
      for (uint32_t r = 0; r < R; ++r) part[r] += q4k_q8_lean_dot(head[r], q[r], staged_slice(sm[r], groups, b, c.s), c);
    }
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) out[r] = warp_sum(part[r]);
    return;
  }
  if (lane / 8 < blocks) load(lane / 8, head, q);
  for (uint32_t b = lane / 8; b < blocks; b += 4) {
    uint4 hn[R], qn[R];  // the next step's bytes, in flight during this step's sums
    const bool more = b + 4 < blocks;
    if (more) load(b + 4, hn, qn);
    const Q8Slice x = staged_slice(sm[0], groups, b, c.s);
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) part[r] += q4k_q8_lean_dot(head[r], q[r], x, c);
    if (more) {
#pragma unroll
      for (uint32_t r = 0; r < R; ++r) head[r] = hn[r], q[r] = qn[r];
    }
  }
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) out[r] = warp_sum(part[r]);
}

template <uint32_t R>
__device__ inline void warp_dot_rows_q4k_q8_lean(const uint8_t* const (&row)[R], uint32_t groups, const uint8_t* sm,
                                                 uint32_t lane, float (&out)[R]) {
  const uint8_t* const x[1] = {sm};
  warp_dot_rows_q4k_q8_lean_x<R, false>(row, groups, x, lane, out);
}

template <uint32_t R>
__device__ inline void warp_dot_rows_q4k_q8_lean_rows(const uint8_t* const (&row)[R], uint32_t groups, const uint8_t* const (&sm)[R],
                                                      uint32_t lane, float (&out)[R]) {
  warp_dot_rows_q4k_q8_lean_x<R, true>(row, groups, sm, lane, out);
}

}  // namespace gpunvme::llm::gpu
