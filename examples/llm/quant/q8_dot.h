// 8-bit activations and integer dot products for the small passes' products (issue 36), written once for
// the CPU and the GPU: the GPU kernels (compute/gpu_rows_q8.cuh, and gpu_rows_q8_batch.cuh's passes of
// several tokens and experts, in the one-token kernel's lane order) call these per slice, and the CPU twin
// below repeats that lane order, so the two agree to the bit (tests/gpu/test_llm_matvec_q8.cpp,
// test_llm_matmul_q8_batch.cpp).
//
// Why: the FP32 kernels dequantise every weight and multiply in FP32, about 4.5 instructions a weight,
// which bounds Llama-3-8B Q4_K's products at 2.97 ms a token on an H200 (0.94x llama.cpp). As llama.cpp's
// mmvq does (its idea, not its code), x is quantised once per product to blocks of 32 int8 with a float
// scale (amax / 127, round to nearest, ties away from zero), and a weight block's quants meet x's in
// 4-byte integer dot products (dp4a: 4 multiply-adds an instruction, exact), the float scales applied once
// per 32 (16 per lane) weights. The result differs from the FP32 product by x's quantisation (a relative
// 1/254 per element at most); what is exact is every integer sum, and the float operations are explicit
// fmaf / products in one fixed order, never contracted differently on the two sides.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "examples/llm/quant/dequant.h"

namespace gpunvme::llm {

inline constexpr int kQ8Block = 32;  // activations per 8-bit block: a Q4_K sub-block, a Q8_0 block

// x's block scale from its largest magnitude, and one element's 8-bit value (llama.cpp's q8_1 rule).
GPUNVME_HD inline float q8_scale(float amax) { return amax / 127.0f; }
GPUNVME_HD inline int8_t q8_value(float v, float d) { return d == 0.0f ? int8_t(0) : int8_t(roundf(v / d)); }

// The sum of the four signed byte products of a and b, plus c (__dp4a on the GPU; exact on both).
GPUNVME_HD inline int32_t dot4_i8(uint32_t a, uint32_t b, int32_t c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(int(a), int(b), c);
#else
  for (int i = 0; i < 4; ++i) c += int32_t(int8_t(a >> (8 * i))) * int32_t(int8_t(b >> (8 * i)));
  return c;
#endif
}

// ---- Q4_K against 8-bit x.
// A super-block (256 weights) is read as 8 slices, one a lane: slice s (0..7) is quant bytes 16s .. 16s+15
// (a 16-byte unit, the block's unit 1 + s), whose low nibbles are elements 64c + 16h + j of the block and
// high nibbles 64c + 32 + 16h + j (j < 16; c = s / 2, h = s % 2): half h of sub-blocks 2c and 2c + 1.
// x's side of a slice: those 16 + 16 int8 values as words, their two blocks' scales, and the sums of
// each 16 (for the mins), computed once and used for every row a lane takes.
struct Q8Slice {
  uint32_t lo[4], hi[4];  // x's int8 values against the low nibbles, against the high ones
  float dlo, dhi;         // their 8-bit blocks' scales
  int32_t slo, shi;       // the sum of each 16
};
GPUNVME_HD inline void q8_slice_sums(Q8Slice& x) {
  x.slo = x.shi = 0;
  for (int k = 0; k < 4; ++k) x.slo = dot4_i8(0x01010101u, x.lo[k], x.slo), x.shi = dot4_i8(0x01010101u, x.hi[k], x.shi);
}

// A slice's part of the row's dot product: with the slice's two sub-blocks' 6-bit scales sc and mins m,
// d * (dlo * (sc_lo * dot_lo) + dhi * (sc_hi * dot_hi)) - dmin * (dlo * (m_lo * sum_lo) + dhi * (m_hi * sum_hi)),
// the integer products exact, the float ones in this order (q4k_slice_sum, the float part, shared by
// the kernels that find the integers their own way: compute/gpu_rows_q4k_q8.cuh). head: the block's
// first 16 bytes as words (d and dmin, then the 12 scale bytes); q: the slice's 16 quant bytes.
GPUNVME_HD inline float q4k_slice_sum(int32_t dlo, int32_t dhi, int32_t sclo, int32_t schi, int32_t mlo, int32_t mhi, float d,
                                      float dmin, const Q8Slice& x) {
  const float fd = fmaf(x.dhi, float(dhi * schi), x.dlo * float(dlo * sclo));
  const float fm = fmaf(x.dhi, float(x.shi * mhi), x.dlo * float(x.slo * mlo));
  return fmaf(d, fd, -(dmin * fm));
}
GPUNVME_HD inline float q4k_slice_dot(const uint32_t (&head)[4], const uint32_t (&q)[4], const Q8Slice& x, uint32_t s) {
  int32_t dlo = 0, dhi = 0;
  for (int k = 0; k < 4; ++k) {
    dlo = dot4_i8(q[k] & 0x0F0F0F0Fu, x.lo[k], dlo);
    dhi = dot4_i8((q[k] >> 4) & 0x0F0F0F0Fu, x.hi[k], dhi);
  }
  const uint32_t sw[3] = {head[1], head[2], head[3]};
  uint8_t sclo, mlo, schi, mhi;
  scale_min_k4(int(2 * (s / 2)), Q4kScaleBytes{sw}, &sclo, &mlo);
  scale_min_k4(int(2 * (s / 2) + 1), Q4kScaleBytes{sw}, &schi, &mhi);
  const float d = half_to_float(uint16_t(head[0] & 0xFFFFu)), dmin = half_to_float(uint16_t(head[0] >> 16));
  return q4k_slice_sum(dlo, dhi, sclo, schi, mlo, mhi, d, dmin, x);
}

// x quantised to 8-bit blocks, as the kernel holds it: q[i] and d[i / 32].
struct Q8Vector {
  std::vector<int8_t> q;
  std::vector<float> d;
};
inline Q8Vector q8_quantize(const float* x, uint32_t n) {
  Q8Vector v{std::vector<int8_t>(n), std::vector<float>(n / kQ8Block)};
  for (uint32_t g = 0; g < n / kQ8Block; ++g) {
    float amax = 0.0f;
    for (int i = 0; i < kQ8Block; ++i) amax = fmaxf(amax, fabsf(x[g * kQ8Block + i]));
    v.d[g] = q8_scale(amax);
    for (int i = 0; i < kQ8Block; ++i) v.q[g * kQ8Block + i] = q8_value(x[g * kQ8Block + i], v.d[g]);
  }
  return v;
}

// x's side of slice s of super-block b from a Q8Vector.
inline Q8Slice q8_slice(const Q8Vector& x, uint32_t b, uint32_t s) {
  Q8Slice r{};
  const uint32_t glo = 8 * b + 2 * (s / 2), h = s % 2;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 4; ++i) {
      r.lo[k] |= uint32_t(uint8_t(x.q[glo * kQ8Block + 16 * h + 4 * k + i])) << (8 * i);
      r.hi[k] |= uint32_t(uint8_t(x.q[(glo + 1) * kQ8Block + 16 * h + 4 * k + i])) << (8 * i);
    }
  r.dlo = x.d[glo], r.dhi = x.d[glo + 1];
  q8_slice_sums(r);
  return r;
}

// The warp's butterfly on the host: lane l adds lane l ^ o's sum for o = 16, 8, 4, 2, 1; lane 0's result.
inline float warp_sum_twin(float (&part)[32]) {
  for (uint32_t o = 16; o > 0; o >>= 1) {
    float next[32];
    for (uint32_t l = 0; l < 32; ++l) next[l] = part[l] + part[l ^ o];
    std::memcpy(part, next, sizeof part);
  }
  return part[0];
}

// The CPU twin of the kernel's row: lane l takes slice l % 8 of super-blocks l / 8, l / 8 + 4, ... in
// order, adding each slice's part to its float sum; then the warp's butterfly (lane l adds lane l ^ o's
// sum for o = 16, 8, 4, 2, 1) and lane 0's result. The GPU's bits (tests/gpu/test_llm_matvec_q8.cpp).
inline float q4k_row_dot_q8(const uint8_t* row, uint32_t cols, const Q8Vector& x) {
  const uint32_t blocks = cols / kQK_K;
  float part[32];
  for (uint32_t l = 0; l < 32; ++l) {
    part[l] = 0.0f;
    for (uint32_t b = l / 8; b < blocks; b += 4) {
      const uint8_t* blk = row + uint64_t(b) * sizeof(BlockQ4_K);
      uint32_t head[4], q[4];
      std::memcpy(head, blk, 16);
      std::memcpy(q, blk + 16 * (1 + l % 8), 16);
      part[l] += q4k_slice_dot(head, q, q8_slice(x, b, l % 8), l % 8);
    }
  }
  return warp_sum_twin(part);
}

// ---- Q8_0 against 8-bit x: a block is 32 weights, one of x's blocks; lane l takes blocks l, l + 32, ...
// Returns the lane's sum `acc` plus the block's part, (d_w * d_x) * (the exact sum of the 32 integer
// products), in one explicit fmaf: written as acc + d * sum, nvcc contracted it into an FMA and the host
// did not (the GPU one ulp off the twin on an H200, call 3 of session 26). Q6_K's likewise.
GPUNVME_HD inline float q8_0_block_dot(uint16_t dw, const uint32_t (&q)[8], const uint32_t (&x)[8], float dx, float acc) {
  int32_t sum = 0;
  for (int k = 0; k < 8; ++k) sum = dot4_i8(q[k], x[k], sum);
  const float d = half_to_float(dw) * dx;
  return fmaf(d, float(sum), acc);
}

// The CPU twin of the kernel's Q8_0 row (the GPU's bits).
inline float q8_0_row_dot_q8(const uint8_t* row, uint32_t cols, const Q8Vector& x) {
  float part[32];
  for (uint32_t l = 0; l < 32; ++l) {
    part[l] = 0.0f;
    for (uint32_t g = l; g < cols / kQK; g += 32) {
      const uint8_t* blk = row + uint64_t(g) * sizeof(BlockQ8_0);
      uint16_t dw;
      uint32_t q[8], xv[8];
      std::memcpy(&dw, blk, 2);
      std::memcpy(q, blk + 2, 32);
      std::memcpy(xv, x.q.data() + uint64_t(g) * kQ8Block, 32);
      part[l] = q8_0_block_dot(dw, q, xv, x.d[g], part[l]);
    }
  }
  return warp_sum_twin(part);
}

// ---- Q6_K against 8-bit x. Slice s (0..7) of a super-block: half n = s / 4 and elements l0 .. l0 + 7
// (l0 = 8 (s % 4)) of its four 32-element groups k = 0..3 (dequant_group's (n, k)): the low 4 bits from ql
// bytes 64n + l0 .. (k = 0, 2: low, high nibble) and 64n + 32 + l0 .. (k = 1, 3), the high 2 from qh bytes
// 32n + l0 .. (bits 2k), the 16-element scale sc[8n + 2k + l0 / 16]. 8 lanes take a super-block.
struct Q6kSlice {
  uint32_t qa[2], qb[2], qh[2];
  int32_t sc[4];
  uint16_t d;
};
GPUNVME_HD inline Q6kSlice q6k_slice(const uint8_t* blk, uint32_t s) {
  const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(blk);
  const uint32_t n = s / 4, l0 = 8 * (s % 4), h = l0 / 16;
  Q6kSlice w;
  uint32_t sw[2];
  load_words_any<2>(b->ql + 64 * n + l0, w.qa);  // 210-byte blocks: 2-byte aligned
  load_words_any<2>(b->ql + 64 * n + 32 + l0, w.qb);
  load_words_any<2>(b->qh + 32 * n + l0, w.qh);
  load_words_any<2>(reinterpret_cast<const uint8_t*>(b->scales) + 8 * n, sw);
  for (uint32_t k = 0; k < 4; ++k) w.sc[k] = int32_t(int8_t(sw[(h + 2 * k) / 4] >> (8 * ((h + 2 * k) % 4))));
#if defined(__CUDA_ARCH__)
  w.d = b->d;
#else
  std::memcpy(&w.d, &b->d, 2);
#endif
  return w;
}
// x's side: group k's 8 int8 values (two words) and its block's scale.
struct Q8Slice6 {
  uint32_t x[4][2];
  float d[4];
};
// acc + d * (dx0 * (sc0 * dot0) + dx1 * (sc1 * dot1) + dx2 * (...) + dx3 * (...)), added in that order
// (the last step one fmaf: q8_0_block_dot's why), each dot the exact sum of 8 products of (q - 32) and
// x's int8.
GPUNVME_HD inline float q6k_slice_dot(const Q6kSlice& w, const Q8Slice6& x, float acc) {
  float t[4];
  for (uint32_t k = 0; k < 4; ++k) {
    int32_t dot = 0;
    for (int j = 0; j < 2; ++j) {
      const uint32_t lo = ((k & 1) ? w.qb[j] : w.qa[j]) >> (k < 2 ? 0 : 4);
      const uint32_t q = (lo & 0x0F0F0F0Fu) | (((w.qh[j] >> (2 * k)) & 0x03030303u) << 4);
      const uint32_t qs = ((q | 0x80808080u) - 0x20202020u) ^ 0x80808080u;  // each byte q - 32, signed
      dot = dot4_i8(qs, x.x[k][j], dot);
    }
    t[k] = float(dot * w.sc[k]);
  }
  const float sum = fmaf(x.d[3], t[3], fmaf(x.d[2], t[2], fmaf(x.d[1], t[1], x.d[0] * t[0])));
  return fmaf(half_to_float(w.d), sum, acc);
}
inline Q8Slice6 q8_slice6(const Q8Vector& x, uint32_t b, uint32_t s) {
  Q8Slice6 r;
  const uint32_t n = s / 4, l0 = 8 * (s % 4);
  for (uint32_t k = 0; k < 4; ++k) {
    const uint32_t G = 8 * b + 4 * n + k;
    std::memcpy(r.x[k], x.q.data() + uint64_t(G) * kQ8Block + l0, 8);
    r.d[k] = x.d[G];
  }
  return r;
}
// The CPU twin of the kernel's Q6_K row: q4k_row_dot_q8's lanes and order, with Q6_K's slices.
inline float q6k_row_dot_q8(const uint8_t* row, uint32_t cols, const Q8Vector& x) {
  float part[32];
  for (uint32_t l = 0; l < 32; ++l) {
    part[l] = 0.0f;
    for (uint32_t b = l / 8; b < cols / kQK_K; b += 4)
      part[l] = q6k_slice_dot(q6k_slice(row + uint64_t(b) * sizeof(BlockQ6_K), l % 8), q8_slice6(x, b, l % 8), part[l]);
  }
  return warp_sum_twin(part);
}

// The CPU twin of the kernel's row of type t (Q4_K, Q6_K or Q8_0).
inline float row_dot_q8(GgmlType t, const uint8_t* row, uint32_t cols, const Q8Vector& x) {
  return t == GgmlType::Q8_0 ? q8_0_row_dot_q8(row, cols, x)
         : t == GgmlType::Q6_K ? q6k_row_dot_q8(row, cols, x)
                               : q4k_row_dot_q8(row, cols, x);
}

}  // namespace gpunvme::llm
