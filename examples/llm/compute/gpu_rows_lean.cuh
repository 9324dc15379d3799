// The staged matrix-vector kernels' lean row loops (issue 36; rows that are not 16-byte aligned take
// gpu_rows.cuh's): the same arithmetic as warp_dot_rows_q4k and warp_dot_rows_dequant (each lane's
// groups in order, each group's 32 products in order, then the same butterfly; every weight
// decoded to dequant.h's value), so the same bits, with fewer instructions around it.
//
// Why: the Q4_K loop of matvec_staged_kernel<Q4_K, 2> is 785 instructions for a group of two rows (64
// weights) in its SASS (cuobjdump, sm_90), where the arithmetic is 4.5 a weight (a byte permute, the
// exponent trick's subtraction, the dequantizing FMA and the product's FMA, a shift and a mask a word):
// load_u32 and load_words test the alignment of every load of every group, their byte-load fallbacks
// issue as predicated-off instructions (16 one-byte loads a group for the scales alone), and
// half_to_float's NaN test branches twice a group. Here a row set whose bytes are 16-byte aligned (tested
// once a set: the same rows, so the same answer, in every lane) loads a Q4_K group as three 16-byte loads
// (its super-block's 16 header bytes and its 32 quant bytes), the lane's sub-block constants are computed
// once (lane i takes groups i, i + 32, ...: all of sub-block i % 8), and one test covers both halves' NaN
// cases. The unquantized types load their groups as 16-byte units and F16 tests its 32 halves for NaN at
// once instead of branching per weight (3,000 instructions in its loop's SASS for 64 weights). Q6_K,
// read from its staged chunks, takes its nibble's and 2-bit field's shifts inside the funnel shifts that
// align its words (two shifts a word fewer, about 16 instructions a group and row of 224).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "examples/llm/compute/gpu_warp.cuh"
#include "examples/llm/quant/dequant.h"

namespace gpunvme::llm::gpu {

// Whether every row of a set starts A-byte aligned (the lean loops' wide loads need it: 16 bytes, or 8
// for Q6_K's 8-byte loads).
template <uint32_t A, uint32_t R>
__device__ inline bool rows_aligned(const uint8_t* const (&row)[R]) {
  uintptr_t any = 0;
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) any |= reinterpret_cast<uintptr_t>(row[r]);
  return any % A == 0;
}

// IEEE half -> float for a half that is not a NaN: half_to_float's device route without its test.
__device__ inline float finite_half_to_float(uint32_t h16) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(uint16_t(h16)));
  return f;
}

// Nonzero where either half of w is a NaN (magnitude above the infinity's 0x7C00).
__device__ inline uint32_t half2_nan_mask(uint32_t w) { return __vcmpgtu2(w & 0x7FFF7FFFu, 0x7C007C00u); }

// ---- Q4_K

// A Q4_K group's bytes: its super-block's first 16 (d, dmin, the 12 scale bytes) and the 32 quant bytes
// of its sub-block pair. `row` 16-byte aligned: 144-byte blocks keep every block and its quants aligned.
struct Q4kRaw {
  uint4 head, q0, q1;
};
__device__ inline Q4kRaw load_q4k_raw(const uint8_t* row, uint32_t g) {
  const auto* b = reinterpret_cast<const uint4*>(row + uint64_t(g / 8) * sizeof(BlockQ4_K));
  const uint32_t pair = (g % 8) / 2;
  return {b[0], b[1 + 2 * pair], b[2 + 2 * pair]};
}

// The constants of a lane's sub-block (sub = lane % 8 for every group the lane takes): scale_min_k4's
// bytes for it (byte sub % 4 of the scale words; sub >= 4 spreads its 6 bits over three bytes) and its
// nibble (decode_q4k_group's shift).
struct Q4kLane {
  uint32_t byte_shift, nibble_shift;
  bool high;
  __device__ explicit Q4kLane(uint32_t lane)
      : byte_shift(8 * (lane % 4)), nibble_shift(4 * (lane & 1)), high(lane % 8 >= 4) {}
};

// A Q4_K group's sum against group `grp` of the staged x, with decode_q4k_group's values and
// group_dot's order: d and dmin from the halves, the 6-bit scale and min as scale_min_k4 reads them,
// dl = d * sc and ml = dmin * m, each weight dl * q - ml with q through byte_to_float (the same
// expressions, so the same contracted FMAs), the products added for l = 0, 1, ..., 31. x is read from
// shared memory a float4 at a time as the words are decoded, not held for the group (with x's 32 floats
// in registers as well, two rows a warp spilled under the 85-register bound).
__device__ inline float q4k_raw_dot(const Q4kRaw& b, const Q4kLane& c, const float4* xs, uint32_t grp) {
  const uint32_t dm = b.head.x;
  float d, dmin;
  if (half2_nan_mask(dm) == 0) {
    d = finite_half_to_float(dm & 0xFFFFu);
    dmin = finite_half_to_float(dm >> 16);
  } else {
    d = half_to_float(uint16_t(dm & 0xFFFFu));
    dmin = half_to_float(uint16_t(dm >> 16));
  }
  // scale_min_k4(sub): sub < 4: bytes sub and sub + 4 (low 6 bits); else the low or high nibble of byte
  // sub + 4 with the top 2 bits of byte sub - 4 (scale) or byte sub (min) as bits 4 and 5.
  const uint32_t a = b.head.y >> c.byte_shift, m4 = b.head.z >> c.byte_shift, h = b.head.w >> c.byte_shift;
  const uint32_t sc = c.high ? (h & 0xFu) | ((a >> 2) & 0x30u) : a & 63u;
  const uint32_t m = c.high ? ((h >> 4) & 0xFu) | ((m4 >> 2) & 0x30u) : m4 & 63u;
  const float dl = d * float(sc), ml = dmin * float(m);
  const uint32_t w[8] = {b.q0.x, b.q0.y, b.q0.z, b.q0.w, b.q1.x, b.q1.y, b.q1.z, b.q1.w};
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) {  // four weights a word, a nibble each
    const uint32_t v = (w[j] >> c.nibble_shift) & 0x0F0F0F0Fu;
    const float4 xv = xs[staged_index(grp, j)];
    const float x4[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float g = dl * byte_to_float<0>(v, i) - ml;
      s += g * x4[i];
    }
  }
  return s;
}

// warp_dot_rows_q4k's sums for 16-byte aligned rows, with its order of loads: the next (row, group)'s
// bytes loaded before this one's arithmetic. (Every row's next group ahead, 24 more registers at two rows
// a warp, spilled 388 bytes a thread under the kernels' 85-register bound.) Two buffers written in turn,
// not a current and a next copied into it: the copy was 12 moves a group and row (a 16th of the loop).
// Why not more overlap or sharing: each of these gave the same bits and was measured slower on the H200
// (issue 36; 8B Q4_K layers as a graph; docs/decode-graph.md): a warp's row sets as one stream of loads
// with 2, 4 or 6 groups in registers across the sets' ends (the first issued before x is staged; 4 and 6
// at two blocks an SM), 3.449 -> 3.825 / 3.801 ms and 4096 x 4096 at 1,260 -> 945-970 GB/s; this loop's
// first groups loaded before x is staged (its a and b held across the staging, spilled), 3.503 -> 4.273
// ms; the products launched with programmatic dependent launch inside the graph, 3.503 -> 3.700 ms. Q6_K's
// and Q8_0's RowChunks carried across the sets' ends: within a few % either way. A set's groups shared by
// a team of 2, 4 or 8 warps (sums through shared memory, added back in this order): faster only at 1,024
// rows, slower at 4,096 and more; two rows' groups with each float4 of x read once for both (two chains),
// 8B 3.332 -> 3.523 ms.
template <uint32_t R>
__device__ inline void warp_dot_rows_q4k_lean(const uint8_t* const (&row)[R], uint32_t groups, const float4* xs,
                                              uint32_t lane, float (&out)[R]) {
  static_assert(R == 1 || R == 2);
  const Q4kLane c(lane);
  float part[R];
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) part[r] = 0.0f;
  Q4kRaw a{}, b{};
  if (lane < groups) a = load_q4k_raw(row[0], lane);
  if constexpr (R == 2) {
    for (uint32_t grp = lane; grp < groups; grp += 32) {  // a: row 0's group, b: row 1's
      b = load_q4k_raw(row[1], grp);
      part[0] += q4k_raw_dot(a, c, xs, grp);
      if (grp + 32 < groups) a = load_q4k_raw(row[0], grp + 32);
      part[1] += q4k_raw_dot(b, c, xs, grp);
    }
  } else {
    for (uint32_t grp = lane; grp < groups; grp += 64) {  // a: group grp, b: group grp + 32
      if (grp + 32 < groups) b = load_q4k_raw(row[0], grp + 32);
      part[0] += q4k_raw_dot(a, c, xs, grp);
      if (grp + 32 >= groups) break;
      if (grp + 64 < groups) a = load_q4k_raw(row[0], grp + 64);
      part[0] += q4k_raw_dot(b, c, xs, grp + 32);
    }
  }
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) out[r] = warp_sum(part[r]);
}

// ---- Q6_K (from a staged chunk: RowChunks)

// The constants of a lane's Q6_K group in a chunk (four 210-byte blocks; lane i takes group i, sub-block
// i % 8 of block i / 8, in every chunk): dequant_group's offsets and shifts for it.
struct Q6kLane {
  uint32_t ql, qh, sc, d;       // byte offsets in the chunk: the group's low bits, high bits, two scales, d
  uint32_t ql_shift, qh_shift;  // its nibble (0 or 4) and its 2-bit field (2k) in the high bits
  __device__ explicit Q6kLane(uint32_t lane) {
    const uint32_t b = uint32_t(sizeof(BlockQ6_K)) * (lane / 8), sub = lane % 8, n = sub / 4, k = sub % 4;
    ql = b + 64 * n + 32 * (k & 1);
    qh = b + uint32_t(offsetof(BlockQ6_K, qh)) + 32 * n;
    sc = b + uint32_t(offsetof(BlockQ6_K, scales)) + 8 * n + 2 * k;
    d = b + uint32_t(offsetof(BlockQ6_K, d));
    ql_shift = k < 2 ? 0 : 4;
    qh_shift = 2 * k;
  }
};

// 32 bytes at q (any alignment: 2 bytes in a Q6_K chunk) as eight words shifted right by `extra` bits
// more: load_words_any's funnel shifts by 8 x misalignment + extra, so a word's nibble or 2-bit field
// needs no shift of its own (its top `extra` bits are the next word's instead of zeros; the masks that
// follow drop them).
__device__ inline void words_shifted(const uint8_t* q, uint32_t extra, uint32_t (&w)[8]) {
  const uint32_t mis = uint32_t(reinterpret_cast<uintptr_t>(q) & 3u);
  const auto* a = reinterpret_cast<const uint32_t*>(q - mis);
  const uint32_t shift = 8 * mis + extra;  // at most 24 + 6
  uint32_t lo = a[0];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t hi = a[j + 1];
    w[j] = __funnelshift_r(lo, hi, shift);
    lo = hi;
  }
}

// A Q6_K group's sum against xv (the group's x, staged_group) with dequant_group's values and group_dot's
// order: each weight (j < 4 ? d * sc[0] : d * sc[1]) * (q - 32), q's low nibble and high 2 bits
// combined as dequant_group combines them (the same byte, so the same exact integer), the products added
// for l = 0, 1, ..., 31. `chunk`: the chunk's first block (RowChunks::at).
__device__ inline float q6k_chunk_dot(const uint8_t* chunk, const Q6kLane& c, const float4 (&xv)[kGroup / 4]) {
  const uint32_t dh = *reinterpret_cast<const uint16_t*>(chunk + c.d);
  const float d = half2_nan_mask(dh) == 0 ? finite_half_to_float(dh) : half_to_float(uint16_t(dh));
  const auto* sc = reinterpret_cast<const int8_t*>(chunk + c.sc);
  const float d0 = d * float(sc[0]), d1 = d * float(sc[1]);  // elements 0..15 and 16..31
  uint32_t lw[8], hw[8];
  words_shifted(chunk + c.ql, c.ql_shift, lw);
  words_shifted(chunk + c.qh, c.qh_shift, hw);
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t v = (lw[j] & 0x0F0F0F0Fu) | ((hw[j] << 4) & 0x30303030u);
    const float x4[4] = {xv[j].x, xv[j].y, xv[j].z, xv[j].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float g = (j < 4 ? d0 : d1) * byte_to_float<32>(v, i);
      s += g * x4[i];
    }
  }
  return s;
}

// ---- F32, F16, BF16

// Elements 8k .. 8k + 7 of group g of a 16-byte aligned row of an unquantized type as dequant_plain_group
// gives them: one or two 16-byte loads; F16 without a NaN among the eight by the conversion instruction,
// else through half_to_float (whose NaN payloads are the host's).
template <GgmlType T>
__device__ inline void plain_eight(const uint8_t* row, uint32_t g, int k, float (&y)[8]) {
  if constexpr (T == GgmlType::F32) {
    const auto* p = reinterpret_cast<const float4*>(row + uint64_t(g) * 128) + 2 * k;
    const float4 a = p[0], b = p[1];
    y[0] = a.x, y[1] = a.y, y[2] = a.z, y[3] = a.w, y[4] = b.x, y[5] = b.y, y[6] = b.z, y[7] = b.w;
  } else {
    const uint4 v = reinterpret_cast<const uint4*>(row + uint64_t(g) * 64)[k];
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    if constexpr (T == GgmlType::BF16) {
#pragma unroll
      for (int j = 0; j < 4; ++j) y[2 * j] = __uint_as_float(w[j] << 16), y[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
    } else if ((half2_nan_mask(w[0]) | half2_nan_mask(w[1]) | half2_nan_mask(w[2]) | half2_nan_mask(w[3])) == 0) {
#pragma unroll
      for (int j = 0; j < 4; ++j) y[2 * j] = finite_half_to_float(w[j] & 0xFFFFu), y[2 * j + 1] = finite_half_to_float(w[j] >> 16);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        y[2 * j] = half_to_float(uint16_t(w[j] & 0xFFFFu)), y[2 * j + 1] = half_to_float(uint16_t(w[j] >> 16));
    }
  }
}

// Whether plain_eight serves type T.
template <GgmlType T>
inline constexpr bool kPlainLean = T == GgmlType::F32 || T == GgmlType::F16 || T == GgmlType::BF16;

// warp_dot_rows_dequant's sums for 16-byte aligned rows of an unquantized type, eight elements of each row
// at a time against the same two float4s of x (group_dot's order: each row's sum over l = 0, 1, ..., 31),
// so that a row's group is never held whole (two rows of F32 groups and x spilled under the 85-register bound).
template <GgmlType T, uint32_t R>
__device__ inline void warp_dot_rows_plain_lean(const uint8_t* const (&row)[R], uint32_t groups, const float4* xs,
                                                uint32_t lane, float (&out)[R]) {
  float part[R];
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) part[r] = 0.0f;
  for (uint32_t grp = lane; grp < groups; grp += 32) {
    float s[R];
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) s[r] = 0.0f;
#pragma unroll
    for (int k = 0; k < kGroup / 8; ++k) {
      const float4 xa = xs[staged_index(grp, 2 * k)], xb = xs[staged_index(grp, 2 * k + 1)];
      const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
      for (uint32_t r = 0; r < R; ++r) {
        float y[8];
        plain_eight<T>(row[r], grp, k, y);
#pragma unroll
        for (int l = 0; l < 8; ++l) s[r] += y[l] * xv[l];
      }
    }
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) part[r] += s[r];
  }
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) out[r] = warp_sum(part[r]);
}

}  // namespace gpunvme::llm::gpu
