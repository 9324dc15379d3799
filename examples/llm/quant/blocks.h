// ggml's weight block formats as data: one struct per type. Each is a row of the weight-type table
// (weight_types.h), which holds its size to ggml's bytes per block, so a wrong field fails to compile.
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

// An unquantized element as a block of one, by bytes (no alignment asked of the row; little-endian).
struct F32Value {
  uint8_t bytes[4];
};
struct F16Value {
  uint8_t bytes[2];  // IEEE half
};
struct BF16Value {
  uint8_t bytes[2];  // the upper half of an IEEE float
};

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

}  // namespace gpunvme::llm
