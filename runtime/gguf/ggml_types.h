// ggml tensor element types as stored in GGUF tensor infos: id, name and block geometry.
// A quantized type packs `block_size` elements into `type_size` bytes; rows must hold a whole
// number of blocks. Ids and sizes are ggml's (ggml.h `enum ggml_type`, ggml.c type traits),
// cross-checked against gguf-py's GGMLQuantizationType / GGML_QUANT_SIZES (gguf 0.19).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpunvme::gguf {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3,
  // 4 and 5 were Q4_2 and Q4_3, removed from ggml in 2023.
  Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  // 31..33 were Q4_0_4_4, Q4_0_4_8, Q4_0_8_8 (removed: repacking is now done at load time).
  TQ1_0 = 34, TQ2_0 = 35,
  // 36..38 were IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8 (removed likewise).
  MXFP4 = 39, NVFP4 = 40, Q1_0 = 41,
};

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;
  uint32_t block_size;  // elements per block
  uint32_t type_size;   // bytes per block
};

// Block geometry per type. The K-quants and most IQ types use super-blocks of QK_K = 256 elements;
// the legacy quants, IQ4_NL and MXFP4 use blocks of 32. Sizes are sizeof(block_xxx) in ggml-common.h.
inline constexpr std::array<GgmlTypeInfo, 34> kGgmlTypes = {{
    {GgmlType::F32, "F32", 1, 4},
    {GgmlType::F16, "F16", 1, 2},
    {GgmlType::Q4_0, "Q4_0", 32, 18},
    {GgmlType::Q4_1, "Q4_1", 32, 20},
    {GgmlType::Q5_0, "Q5_0", 32, 22},
    {GgmlType::Q5_1, "Q5_1", 32, 24},
    {GgmlType::Q8_0, "Q8_0", 32, 34},
    {GgmlType::Q8_1, "Q8_1", 32, 40},
    {GgmlType::Q2_K, "Q2_K", 256, 84},
    {GgmlType::Q3_K, "Q3_K", 256, 110},
    {GgmlType::Q4_K, "Q4_K", 256, 144},
    {GgmlType::Q5_K, "Q5_K", 256, 176},
    {GgmlType::Q6_K, "Q6_K", 256, 210},
    {GgmlType::Q8_K, "Q8_K", 256, 292},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66},
    {GgmlType::IQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98},
    {GgmlType::IQ1_S, "IQ1_S", 256, 50},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18},
    {GgmlType::IQ3_S, "IQ3_S", 256, 110},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82},
    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::I8, "I8", 1, 1},
    {GgmlType::I16, "I16", 1, 2},
    {GgmlType::I32, "I32", 1, 4},
    {GgmlType::I64, "I64", 1, 8},
    {GgmlType::F64, "F64", 1, 8},
    {GgmlType::IQ1_M, "IQ1_M", 256, 56},
    {GgmlType::BF16, "BF16", 1, 2},
    {GgmlType::TQ1_0, "TQ1_0", 256, 54},
    {GgmlType::TQ2_0, "TQ2_0", 256, 66},
    {GgmlType::MXFP4, "MXFP4", 32, 17},
    {GgmlType::NVFP4, "NVFP4", 64, 36},
    {GgmlType::Q1_0, "Q1_0", 128, 18},
}};

// The row of a type the table holds, at compile time (a type missing from it does not compile there).
constexpr GgmlTypeInfo ggml_traits(GgmlType type) {
  for (const auto& t : kGgmlTypes) {
    if (t.type == type) return t;
  }
  throw "ggml_traits: a type missing from kGgmlTypes";
}

// Traits of a known type id, or nullopt for an unknown or removed id.
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type_id);

// "Q4_K" for a known id; "unknown type 4 (Q4_2, removed from ggml in 2023)" style text otherwise.
std::string ggml_type_name(uint32_t type_id);

// Every known type, in id order (for tests and tools).
const std::array<GgmlTypeInfo, 34>& ggml_all_types();

}  // namespace gpunvme::gguf
