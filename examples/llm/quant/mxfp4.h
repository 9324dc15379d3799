// MXFP4 (ggml type 39; gpt-oss's expert weights): the OCP microscaling format as ggml stores it. A
// block is 32 elements in 17 bytes: one E8M0 scale byte, then 16 bytes of 4-bit E2M1 values, element j
// in the low nibble of qs[j] and element j + 16 in the high nibble. ggml keeps the E2M1 values doubled
// (kvalues_mxfp4: 0 1 2 3 4 6 8 12 and their negatives, so they are integers) and halves the scale
// instead (ggml_e8m0_to_fp32_half): element = kvalue * 2^(e - 128). The formulas are ggml's
// dequantize_row_mxfp4 and gguf-py's quants.MXFP4; tests/llm/dequant_check.py holds these to gguf-py's
// bits. Compiled for the host and the GPU alike.
#pragma once
#include <cstdint>
#include <cstring>

#include "driver/compiler.h"

namespace gpunvme::llm {

struct BlockMXFP4 {
  uint8_t e;       // E8M0 scale: 2^(e - 127) in the format, 2^(e - 128) with ggml's doubled values
  uint8_t qs[16];  // E2M1 codes, two a byte
};
static_assert(sizeof(BlockMXFP4) == 17);

// ggml_e8m0_to_fp32_half: 2^(e - 128) as float bits; e 0 and 1 give the subnormals 2^-128 and 2^-127.
// (e = 255 is 2^127 here, not the format's NaN: ggml does the same.)
GPUNVME_HD inline float e8m0_to_float_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

// kvalues_mxfp4[code]: the doubled E2M1 value of a 4-bit code (bit 3 the sign), as an integer, so
// code 8 is +0 as in ggml's table (a float negation would give -0 and other bits). The magnitudes
// 0 1 2 3 4 6 8 12 are the bytes of one 64-bit word; on the GPU one byte permute picks them.
GPUNVME_HD inline int e2m1_doubled(uint32_t code) {
#if defined(__CUDA_ARCH__)
  const int mag = int(__byte_perm(0x03020100u, 0x0C080604u, code & 7u));
#else
  const int mag = int((0x0C08060403020100ull >> (8 * (code & 7u))) & 0xFFu);
#endif
  return code & 8u ? -mag : mag;
}

GPUNVME_HD inline void dequant_block(const BlockMXFP4& b, float* y) {
  const float d = e8m0_to_float_half(b.e);
  for (int j = 0; j < 16; ++j) {
    y[j] = float(e2m1_doubled(b.qs[j] & 0xFu)) * d;
    y[j + 16] = float(e2m1_doubled(uint32_t(b.qs[j]) >> 4)) * d;
  }
}

}  // namespace gpunvme::llm
