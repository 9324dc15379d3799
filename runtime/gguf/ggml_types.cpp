#include "runtime/gguf/ggml_types.h"

namespace gpunvme::gguf {
namespace {

using T = GgmlType;

// Block geometry per type. The K-quants and most IQ types use super-blocks of QK_K = 256 elements;
// the legacy quants, IQ4_NL and MXFP4 use blocks of 32. Sizes are sizeof(block_xxx) in ggml-common.h.
constexpr std::array<GgmlTypeInfo, 34> kTypes = {{
    {T::F32, "F32", 1, 4},
    {T::F16, "F16", 1, 2},
    {T::Q4_0, "Q4_0", 32, 18},
    {T::Q4_1, "Q4_1", 32, 20},
    {T::Q5_0, "Q5_0", 32, 22},
    {T::Q5_1, "Q5_1", 32, 24},
    {T::Q8_0, "Q8_0", 32, 34},
    {T::Q8_1, "Q8_1", 32, 40},
    {T::Q2_K, "Q2_K", 256, 84},
    {T::Q3_K, "Q3_K", 256, 110},
    {T::Q4_K, "Q4_K", 256, 144},
    {T::Q5_K, "Q5_K", 256, 176},
    {T::Q6_K, "Q6_K", 256, 210},
    {T::Q8_K, "Q8_K", 256, 292},
    {T::IQ2_XXS, "IQ2_XXS", 256, 66},
    {T::IQ2_XS, "IQ2_XS", 256, 74},
    {T::IQ3_XXS, "IQ3_XXS", 256, 98},
    {T::IQ1_S, "IQ1_S", 256, 50},
    {T::IQ4_NL, "IQ4_NL", 32, 18},
    {T::IQ3_S, "IQ3_S", 256, 110},
    {T::IQ2_S, "IQ2_S", 256, 82},
    {T::IQ4_XS, "IQ4_XS", 256, 136},
    {T::I8, "I8", 1, 1},
    {T::I16, "I16", 1, 2},
    {T::I32, "I32", 1, 4},
    {T::I64, "I64", 1, 8},
    {T::F64, "F64", 1, 8},
    {T::IQ1_M, "IQ1_M", 256, 56},
    {T::BF16, "BF16", 1, 2},
    {T::TQ1_0, "TQ1_0", 256, 54},
    {T::TQ2_0, "TQ2_0", 256, 66},
    {T::MXFP4, "MXFP4", 32, 17},
    {T::NVFP4, "NVFP4", 64, 36},
    {T::Q1_0, "Q1_0", 128, 18},
}};

}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type_id) {
  for (const auto& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == type_id) return t;
  }
  return std::nullopt;
}

std::string ggml_type_name(uint32_t type_id) {
  if (auto info = ggml_type_info(type_id)) return std::string(info->name);
  std::string s = "unknown ggml type " + std::to_string(type_id);
  if (type_id == 4 || type_id == 5) {
    s += " (Q4_2/Q4_3, removed from ggml in 2023; re-quantize the model with a current llama.cpp)";
  } else if (type_id >= 31 && type_id <= 33) {
    s += " (Q4_0_4_4/Q4_0_4_8/Q4_0_8_8, removed from ggml; re-quantize to Q4_0)";
  } else if (type_id >= 36 && type_id <= 38) {
    s += " (IQ4_NL_4_4/4_8/8_8, removed from ggml; re-quantize to IQ4_NL)";
  } else {
    s += " (newer than this reader, or a corrupt file)";
  }
  return s;
}

const std::array<GgmlTypeInfo, 34>& ggml_all_types() { return kTypes; }

}  // namespace gpunvme::gguf
