// ggml's weight block formats as data: one struct per type, its size asserted against the byte
// counts gguf-py and llama.cpp use (GGML_QUANT_SIZES, also in runtime/gguf/ggml_types.cpp), so a
// wrong field fails to compile.
// Compiled for the host and the GPU alike (dequant.h works on these structs on both).
#pragma once
#include <cstdint>

#include "driver/compiler.h"
#include "examples/llm/quant/mxfp4.h"
#include "runtime/gguf/ggml_types.h"

namespace gpunvme::llm {

using gguf::GgmlType;  // ids and block geometry: runtime/gguf/ggml_types.h

inline constexpr int kQK = 32;     // elements in a Q4_0 / Q5_0 / Q8_0 block
inline constexpr int kQK_K = 256;  // elements in a k-quant super-block

struct BlockQ4_0 {
  uint16_t d;               // scale, IEEE half
  uint8_t qs[kQK / 2];      // element j in the low nibble of qs[j], element j + 16 in the high nibble
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];            // bit j: fifth bit of element j (little-endian 32-bit word)
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
struct BlockQ4_K {
  uint16_t d;               // super-block scale for the 6-bit sub-block scales
  uint16_t dmin;            // super-block scale for the 6-bit sub-block mins
  uint8_t scales[12];       // 8 (scale, min) pairs of 6 bits, packed (scale_min_k4)
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];    // fifth bits
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];    // low 4 bits
  uint8_t qh[kQK_K / 4];    // high 2 bits
  int8_t scales[kQK_K / 16];
  uint16_t d;
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// The types the engine computes (dequant.h has a block routine for each).
GPUNVME_HD constexpr bool computes(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0: case GgmlType::Q5_0:
    case GgmlType::Q8_0: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K: case GgmlType::MXFP4:
      return true;
    default:
      return false;
  }
}

}  // namespace gpunvme::llm
