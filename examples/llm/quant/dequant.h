// Dequantization of one ggml block into floats, written once for the CPU and the GPU. The formulas
// are ggml's (dequantize_row_* in ggml-quants.c), restated per block; tests/llm/dequant_check.py holds
// them equal to gguf-py's `gguf.quants.dequantize` for every type, on random blocks and on the real
// Gemma 3 model. The matrix-vector kernels call these per block, so the GPU computes exactly these values.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>

#include "examples/llm/quant/weight_types.h"

namespace gpunvme::llm {

// IEEE half -> float, bit exact for every value (normals, subnormals, inf, NaN) without intrinsics, so
// the host and the device agree to the bit. On the GPU the conversion instruction gives the same bits for
// every value but a NaN (exact: a float holds every half), in one instruction instead of a dozen and a
// loop for subnormals (a Q4_K group converts two scales, an F16 group 32 weights); NaNs keep the
// bit-by-bit route, whose payload the host's matches.
GPUNVME_HD inline float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  if ((h & 0x7FFFu) <= 0x7C00u) {  // not a NaN
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
  }
#endif
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal half: normalise
    exp = 113;
    while ((mant & 0x400u) == 0) { mant <<= 1; --exp; }
    bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

GPUNVME_HD inline float bf16_to_float(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

// Sub-block j's 6-bit scale and min of a Q4_K / Q5_K super-block (ggml's get_scale_min_k4). `q` is the
// 12 scale bytes: a pointer to them, or anything whose q[i] is byte i (Q4kScaleBytes: in registers).
template <class Bytes>
GPUNVME_HD inline void scale_min_k4(int j, const Bytes& q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

GPUNVME_HD inline void dequant_block(const BlockQ4_0& b, float* y) {
  const float d = half_to_float(b.d);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = float((b.qs[j] & 0xF) - 8) * d;
    y[j + kQK / 2] = float((b.qs[j] >> 4) - 8) * d;
  }
}

GPUNVME_HD inline void dequant_block(const BlockQ5_0& b, float* y) {
  const float d = half_to_float(b.d);
  const uint32_t qh = uint32_t(b.qh[0]) | uint32_t(b.qh[1]) << 8 | uint32_t(b.qh[2]) << 16 | uint32_t(b.qh[3]) << 24;
  for (int j = 0; j < kQK / 2; ++j) {
    const uint8_t h0 = uint8_t(((qh >> j) << 4) & 0x10);
    const uint8_t h1 = uint8_t((qh >> (j + 12)) & 0x10);
    y[j] = float(int((b.qs[j] & 0xF) | h0) - 16) * d;
    y[j + kQK / 2] = float(int((b.qs[j] >> 4) | h1) - 16) * d;
  }
}

GPUNVME_HD inline void dequant_block(const BlockQ8_0& b, float* y) {
  const float d = half_to_float(b.d);
  for (int j = 0; j < kQK; ++j) y[j] = float(b.qs[j]) * d;
}

GPUNVME_HD inline void dequant_block(const BlockQ4_K& b, float* y) {
  const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
  const uint8_t* q = b.qs;
  for (int j = 0; j < kQK_K; j += 64, q += 32) {
    uint8_t sc, m;
    scale_min_k4(j / 32, b.scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(j / 32 + 1, b.scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) y[j + l] = d1 * float(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) y[j + 32 + l] = d2 * float(q[l] >> 4) - m2;
  }
}

GPUNVME_HD inline void dequant_block(const BlockQ5_K& b, float* y) {
  const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
  const uint8_t* ql = b.qs;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < kQK_K; j += 64, ql += 32, u1 <<= 2, u2 <<= 2) {
    uint8_t sc, m;
    scale_min_k4(j / 32, b.scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(j / 32 + 1, b.scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) y[j + l] = d1 * float((ql[l] & 0xF) + (b.qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) y[j + 32 + l] = d2 * float((ql[l] >> 4) + (b.qh[l] & u2 ? 16 : 0)) - m2;
  }
}

GPUNVME_HD inline void dequant_block(const BlockQ6_K& b, float* y) {
  const float d = half_to_float(b.d);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int n = 0; n < kQK_K; n += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[n + l] = d * float(sc[is + 0]) * float(q1);
      y[n + l + 32] = d * float(sc[is + 2]) * float(q2);
      y[n + l + 64] = d * float(sc[is + 4]) * float(q3);
      y[n + l + 96] = d * float(sc[is + 6]) * float(q4);
    }
  }
}

GPUNVME_HD inline void dequant_block(const F32Value& b, float* y) { memcpy(y, b.bytes, 4); }
GPUNVME_HD inline void dequant_block(const F16Value& b, float* y) { y[0] = half_to_float(uint16_t(b.bytes[0] | b.bytes[1] << 8)); }
GPUNVME_HD inline void dequant_block(const BF16Value& b, float* y) { y[0] = bf16_to_float(uint16_t(b.bytes[0] | b.bytes[1] << 8)); }

// Elements per group: the unit the matrix-vector kernels dequantize at once (32 floats fit in a
// thread's registers). A group never straddles a block, and every type's row is a whole number of groups.
inline constexpr int kGroup = 32;

// N * 4 bytes at any address as N little-endian words (N a multiple of 4). On the GPU the N + 1 aligned
// words that hold them, shifted into place (a funnel shift a word; shift 0 where q is aligned): 9 loads
// for 32 bytes instead of 16 two-byte or 32 one-byte ones, and the same instructions for every lane. The
// types whose blocks are not a multiple of 16 bytes (Q6_K's 210, Q8_0's 34, Q4_0's 18, MXFP4's 17) put the
// lanes of a warp at different alignments: a choice of load by alignment ran each of its branches in turn.
// The words' extra bytes lie in the same aligned words as bytes of q, so no load reaches a page that q's
// bytes do not.
template <int N>
GPUNVME_HD inline void load_words_any(const uint8_t* q, uint32_t (&w)[N]) {
#if defined(__CUDA_ARCH__)
  const uint32_t mis = uint32_t(reinterpret_cast<uintptr_t>(q) & 3u);
  const auto* a = reinterpret_cast<const uint32_t*>(q - mis);  // not from an integer: keeps q's address space
  uint32_t lo = a[0];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const uint32_t hi = a[j + 1];
    w[j] = __funnelshift_r(lo, hi, 8u * mis);
    lo = hi;
  }
#else
  for (int j = 0; j < N; ++j)
    w[j] = uint32_t(q[4 * j]) | uint32_t(q[4 * j + 1]) << 8 | uint32_t(q[4 * j + 2]) << 16 | uint32_t(q[4 * j + 3]) << 24;
#endif
}

// The same words with the widest loads q's alignment allows, for bytes whose alignment is the same in
// every lane of a warp (Q4_K's and Q5_K's quants are 16-byte aligned in VRAM: a super-block is 144 or 176
// bytes and its quants start at byte 16 or 48; the unquantized types' groups): a warp's byte loads touched
// a sector per lane per byte, and were a tenth of the row kernel's instructions. The same bytes either way.
template <int N>
GPUNVME_HD inline void load_words(const uint8_t* q, uint32_t (&w)[N]) {
  static_assert(N % 4 == 0);
#if defined(__CUDA_ARCH__)
  const uintptr_t at = reinterpret_cast<uintptr_t>(q);
  if ((at & 15u) == 0) {
#pragma unroll
    for (int k = 0; k < N / 4; ++k) {
      const uint4 a = reinterpret_cast<const uint4*>(q)[k];
      w[4 * k] = a.x, w[4 * k + 1] = a.y, w[4 * k + 2] = a.z, w[4 * k + 3] = a.w;
    }
    return;
  }
  if ((at & 3u) == 0) {
#pragma unroll
    for (int j = 0; j < N; ++j) w[j] = reinterpret_cast<const uint32_t*>(q)[j];
    return;
  }
#endif
  load_words_any<N>(q, w);
}

GPUNVME_HD inline void load_32_bytes(const uint8_t* q, uint32_t (&w)[8]) { load_words<8>(q, w); }

// Byte i of v minus Bias, as a float: the exact integer on both sides, so the same bits. On the GPU a
// byte permute puts the byte under the exponent of 2^23 and one subtraction takes 2^23 + Bias off (a
// PRMT and an FADD per weight), instead of shifts, masks and an integer-to-float conversion (quarter
// rate on sm_90), which made the Q4_K row kernel issue-bound at about 12 instructions per weight.
template <uint32_t Bias>
GPUNVME_HD inline float byte_to_float(uint32_t v, int i) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7540u + uint32_t(i))) - (8388608.0f + float(Bias));
#else
  return float(int((v >> (8 * i)) & 0xFFu) - int(Bias));
#endif
}

// Four little-endian bytes as a word, with one load when p is 4-byte aligned (on the GPU).
GPUNVME_HD inline uint32_t load_u32(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 3u) == 0) return *reinterpret_cast<const uint32_t*>(p);
#endif
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// A Q4_K group's bytes, loaded (load_q4k_group) apart from their arithmetic (decode_q4k_group), so that
// a row kernel can have the next group's loads in flight while it computes this one. Together they are
// dequant_group's Q4_K case.
struct Q4kGroupBytes {
  uint32_t dm = 0;      // d | dmin << 16 (halves)
  uint32_t sc[3] = {};  // the super-block's 12 scale bytes
  uint32_t q[8] = {};   // the group's 32 quant bytes (its sub-block pair's)
};

GPUNVME_HD inline Q4kGroupBytes load_q4k_group(const uint8_t* row, uint64_t g) {
  const auto* b = reinterpret_cast<const BlockQ4_K*>(row) + g / 8;
  const auto* bytes = reinterpret_cast<const uint8_t*>(b);
  Q4kGroupBytes r;
  r.dm = load_u32(bytes);
  for (int i = 0; i < 3; ++i) r.sc[i] = load_u32(b->scales + 4 * i);
  load_32_bytes(b->qs + 32 * ((g % 8) / 2), r.q);
  return r;
}

// The scale bytes of a Q4kGroupBytes for scale_min_k4: byte i (0..11) taken from the words by selects
// (an indexed array of bytes would live in local memory).
struct Q4kScaleBytes {
  const uint32_t (&w)[3];
  GPUNVME_HD uint8_t operator[](int i) const {
    const uint32_t word = i < 4 ? w[0] : i < 8 ? w[1] : w[2];
    return uint8_t(word >> (8 * (i & 3)));
  }
};

GPUNVME_HD inline void decode_q4k_group(const Q4kGroupBytes& b, uint64_t g, float* y) {
  const int sub = int(g % 8);  // 8 sub-blocks of 32 per super-block
  const float d = half_to_float(uint16_t(b.dm & 0xFFFFu)), dmin = half_to_float(uint16_t(b.dm >> 16));
  uint8_t sc, m;
  scale_min_k4(sub, Q4kScaleBytes{b.sc}, &sc, &m);
  const float dl = d * sc, ml = dmin * m;
  const int shift = 4 * (sub & 1);
  for (int j = 0; j < 8; ++j) {  // four weights a word, a nibble each
    const uint32_t v = (b.q[j] >> shift) & 0x0F0F0F0Fu;
    for (int i = 0; i < 4; ++i) y[4 * j + i] = dl * byte_to_float<0>(v, i) - ml;
  }
}

// Group `g` of an unquantized row (F32, F16, BF16: 32 consecutive elements) through load_32_bytes.
// Why: element by element, each 4-byte memcpy from a byte pointer became four byte loads on the GPU,
// and the F32 router product of every MoE layer (Qwen3-30B-A3B: 128 x 2048) took 46 us where its
// bytes take a few. The same values either way: a load does not change bits.
GPUNVME_HD inline void dequant_plain_group(GgmlType t, const uint8_t* p, uint64_t g, float* y) {
  uint32_t w[8];
  if (t == GgmlType::F32) {
    for (int c = 0; c < 4; ++c) {  // 128 bytes: four loads of eight floats
      load_32_bytes(p + 128 * g + 32 * c, w);
      for (int j = 0; j < 8; ++j) memcpy(y + 8 * c + j, &w[j], 4);
    }
    return;
  }
  for (int c = 0; c < 2; ++c) {  // 64 bytes: two loads of sixteen halves
    load_32_bytes(p + 64 * g + 32 * c, w);
    for (int j = 0; j < 8; ++j) {
      const uint16_t lo = uint16_t(w[j] & 0xFFFFu), hi = uint16_t(w[j] >> 16);
      y[16 * c + 2 * j] = t == GgmlType::F16 ? half_to_float(lo) : bf16_to_float(lo);
      y[16 * c + 2 * j + 1] = t == GgmlType::F16 ? half_to_float(hi) : bf16_to_float(hi);
    }
  }
}

// Group g (elements 32g .. 32g + 31) of a row, for the types whose block is not one group: several
// groups a super-block (the k-quants) or several blocks a group (the unquantized types). A type whose
// block is one group needs none: dequant_group_of uses its dequant_block.
GPUNVME_HD inline void dequant_group(const F32Value* row, uint64_t g, float* y) {
  dequant_plain_group(GgmlType::F32, reinterpret_cast<const uint8_t*>(row), g, y);
}
GPUNVME_HD inline void dequant_group(const F16Value* row, uint64_t g, float* y) {
  dequant_plain_group(GgmlType::F16, reinterpret_cast<const uint8_t*>(row), g, y);
}
GPUNVME_HD inline void dequant_group(const BF16Value* row, uint64_t g, float* y) {
  dequant_plain_group(GgmlType::BF16, reinterpret_cast<const uint8_t*>(row), g, y);
}

GPUNVME_HD inline void dequant_group(const BlockQ4_K* row, uint64_t g, float* y) {
  decode_q4k_group(load_q4k_group(reinterpret_cast<const uint8_t*>(row), g), g, y);
}

GPUNVME_HD inline void dequant_group(const BlockQ5_K* row, uint64_t g, float* y) {
  const int sub = int(g % 8);  // 8 sub-blocks of 32 per super-block
  const auto* b = row + g / 8;
  const float d = half_to_float(b->d), dmin = half_to_float(b->dmin);
  uint8_t sc, m;
  scale_min_k4(sub, b->scales, &sc, &m);
  const float dl = d * sc, ml = dmin * m;
  const int shift = 4 * (sub & 1);
  uint32_t qw[8], hw[8];
  load_32_bytes(b->qs + 32 * (sub / 2), qw);
  load_32_bytes(b->qh, hw);
  for (int j = 0; j < 8; ++j) {  // four weights a word: a byte each, nibble plus fifth bit
    const uint32_t v = ((qw[j] >> shift) & 0x0F0F0F0Fu) | (((hw[j] >> sub) & 0x01010101u) << 4);
    for (int i = 0; i < 4; ++i) y[4 * j + i] = dl * byte_to_float<0>(v, i) - ml;
  }
}

GPUNVME_HD inline void dequant_group(const BlockQ6_K* row, uint64_t g, float* y) {
  const auto& b = row[g / 8];
  const int sub = int(g % 8);  // 32-element groups: half (n) of 128, then quarter (k) of it
  const int n = sub / 4, k = sub % 4;
  const float d = half_to_float(b.d);
  const uint8_t* ql = b.ql + 64 * n + (k & 1) * 32;
  const uint8_t* qh = b.qh + 32 * n;
  const int8_t* sc = b.scales + 8 * n + 2 * k;
  const float d0 = d * float(sc[0]), d1 = d * float(sc[1]);  // elements 0..15 and 16..31
  uint32_t lw[8], hw[8];  // 210-byte super-blocks: the lanes' alignments differ
  load_words_any<8>(ql, lw);
  load_words_any<8>(qh, hw);
  for (int j = 0; j < 8; ++j) {  // four weights a word: low nibble (k < 2) or high, and two high bits
    const uint32_t v = ((lw[j] >> (k < 2 ? 0 : 4)) & 0x0F0F0F0Fu) | (((hw[j] >> (2 * k)) & 0x03030303u) << 4);
    for (int i = 0; i < 4; ++i) y[4 * j + i] = (j < 4 ? d0 : d1) * byte_to_float<32>(v, i);
  }
}

// Q8_0's and Q4_0's blocks (one group each; Q5_0's and MXFP4's below) on the GPU: the quants as words (load_words_any) and each weight
// through byte_to_float, instead of a byte load and an integer-to-float conversion (quarter rate on sm_90)
// per weight, which bound the Q8_0 matrix-vector kernel near the copy's rate. The values are
// dequant_block's: the same exact integers times the same scale (the one-hot test in
// tests/gpu/test_llm_matmul.cpp holds every weight to the CPU's). dequant_group_of uses them on the GPU only.
GPUNVME_HD inline void dequant_group_words(const BlockQ8_0& b, float* y) {
  const float d = half_to_float(b.d);
  uint32_t w[8];
  load_words_any<8>(reinterpret_cast<const uint8_t*>(b.qs), w);
  for (int j = 0; j < 8; ++j) {
    const uint32_t v = w[j] ^ 0x80808080u;  // int8 q as the byte q + 128
    for (int i = 0; i < 4; ++i) y[4 * j + i] = byte_to_float<128>(v, i) * d;
  }
}
GPUNVME_HD inline void dequant_group_words(const BlockQ4_0& b, float* y) {
  const float d = half_to_float(b.d);
  uint32_t w[4];
  load_words_any<4>(b.qs, w);
  for (int j = 0; j < 4; ++j) {
    const uint32_t lo = w[j] & 0x0F0F0F0Fu, hi = (w[j] >> 4) & 0x0F0F0F0Fu;
    for (int i = 0; i < 4; ++i) {
      y[4 * j + i] = byte_to_float<8>(lo, i) * d;
      y[kQK / 2 + 4 * j + i] = byte_to_float<8>(hi, i) * d;
    }
  }
}

// Q5_0: the fifth bits (qh, the 4 bytes before the quants) and the quants as five words; four elements'
// fifth bits spread to bit 4 of their bytes by one multiplication (bit k to bit 8k: the shifted copies of
// a 4-bit value do not overlap, so nothing carries).
GPUNVME_HD inline void dequant_group_words(const BlockQ5_0& b, float* y) {
  const float d = half_to_float(b.d);
  uint32_t w[5];  // w[0]: qh; w[1..4]: qs
  load_words_any<5>(b.qh, w);
  auto fifth = [](uint32_t bits4) { return ((bits4 * 0x00204081u) & 0x01010101u) << 4; };
  for (int j = 0; j < 4; ++j) {
    const uint32_t lo = (w[1 + j] & 0x0F0F0F0Fu) | fifth((w[0] >> (4 * j)) & 0xFu);
    const uint32_t hi = ((w[1 + j] >> 4) & 0x0F0F0F0Fu) | fifth((w[0] >> (16 + 4 * j)) & 0xFu);
    for (int i = 0; i < 4; ++i) {
      y[4 * j + i] = byte_to_float<16>(lo, i) * d;
      y[kQK / 2 + 4 * j + i] = byte_to_float<16>(hi, i) * d;
    }
  }
}

// MXFP4 the same way: four codes' magnitudes by one byte permute of the table's bytes (e2m1_doubled's),
// each as the byte 12 + value (12 - magnitude where the code's sign bit is set), so byte_to_float<12> gives
// e2m1_doubled's integer exactly (code 8 too: +0), times the same scale.
GPUNVME_HD inline uint32_t e2m1_biased_bytes(uint32_t v) {  // v: four codes, one in each byte's low nibble
#if defined(__CUDA_ARCH__)
  const uint32_t low = v & 0x07070707u, pairs = low | (low >> 4);  // bytes 0 and 2: two 3-bit indexes each
  const uint32_t mag = __byte_perm(0x03020100u, 0x0C080604u, (pairs & 0xFFu) | ((pairs >> 8) & 0xFF00u));
  const uint32_t neg = ((v >> 3) & 0x01010101u) * 0xFFu;  // 0xFF in the bytes whose code is negative
  return ((0x0C0C0C0Cu + mag) & ~neg) | ((0x0C0C0C0Cu - mag) & neg);
#else
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t(12 + e2m1_doubled((v >> (8 * i)) & 0xFu)) << (8 * i);
  return r;
#endif
}
GPUNVME_HD inline void dequant_group_words(const BlockMXFP4& b, float* y) {
  const float d = e8m0_to_float_half(b.e);
  uint32_t w[4];
  load_words_any<4>(b.qs, w);
  for (int j = 0; j < 4; ++j) {
    const uint32_t lo = e2m1_biased_bytes(w[j] & 0x0F0F0F0Fu), hi = e2m1_biased_bytes((w[j] >> 4) & 0x0F0F0F0Fu);
    for (int i = 0; i < 4; ++i) {
      y[4 * j + i] = byte_to_float<12>(lo, i) * d;
      y[16 + 4 * j + i] = byte_to_float<12>(hi, i) * d;
    }
  }
}

// The two dequantisations of a row of table row R (weight_types.h): block i, or 32-element group g. The
// two routes give the same values (tests/llm's dequant test holds them equal for every row).
template <class R>
GPUNVME_HD inline void dequant_block_of(const void* row, uint64_t i, float* y) {
  dequant_block(static_cast<const typename R::Block*>(row)[i], y);
}
template <class R>
GPUNVME_HD inline void dequant_group_of(const void* row, uint64_t g, float* y) {
  const auto* blocks = static_cast<const typename R::Block*>(row);
#if defined(__CUDA_ARCH__)
  if constexpr (requires { dequant_group_words(blocks[g], y); }) return dequant_group_words(blocks[g], y);
#endif
  if constexpr (R::kElems == kGroup)
    dequant_block(blocks[g], y);
  else
    dequant_group(blocks, g, y);
}

// Group g of a row of type T known when compiling: what the GPU kernels call (no switch in the kernel).
template <GgmlType T>
GPUNVME_HD inline void dequant_group(const void* row, uint64_t g, float* y) {
  dequant_group_of<RowFor<T>>(row, g, y);
}

// The dispatch by a type known at run time, generated from the table: a row's routine. Callers check
// computes(t) when they load the model; a type without a row leaves a block alone and makes a group NaN.
template <class... Rows>
GPUNVME_HD inline void dequant_block_in(WeightTable<Rows...>, GgmlType t, const void* row, uint64_t i, float* y) {
  (void)((t == Rows::type && (dequant_block_of<Rows>(row, i, y), true)) || ...);
}
template <class... Rows>
GPUNVME_HD inline void dequant_group_in(WeightTable<Rows...>, GgmlType t, const void* row, uint64_t g, float* y) {
  if (((t == Rows::type && (dequant_group_of<Rows>(row, g, y), true)) || ...)) return;
  for (int l = 0; l < kGroup; ++l) y[l] = std::numeric_limits<float>::quiet_NaN();  // a type without a row: loud, never stale values
}

// Dequantizes block `i` of a row of type `t` starting at `row` into y[0 .. block_elems).
GPUNVME_HD inline void dequant_block(GgmlType t, const void* row, uint64_t i, float* y) {
  dequant_block_in(WeightTypes{}, t, row, i, y);
}

// Dequantizes group `g` (elements 32g .. 32g + 31) of a row of type `t` into y[0..32). Equal to the
// matching slice of dequant_block's output for every type (tests/llm holds the two routes equal).
GPUNVME_HD inline void dequant_group(GgmlType t, const void* row, uint64_t g, float* y) {
  dequant_group_in(WeightTypes{}, t, row, g, y);
}

}  // namespace gpunvme::llm
