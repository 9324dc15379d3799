// Which weight types' small-pass products (passes of 1-32 tokens, selected and fetched experts) take 8-bit
// x (gpu_matmul.h, GPUNVME_MATVEC_Q8): by type, because a file of one nominal type mixes them (Q4_K_M
// holds Q6_K matrices too) and whether the 8-bit path is faster is measured per type (docs/performance.md
// §8). Host code, so that the CPU tests hold the grammar.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

#include "runtime/gguf/ggml_types.h"

namespace gpunvme::llm {

inline constexpr gguf::GgmlType kQ8Types[] = {gguf::GgmlType::Q4_K, gguf::GgmlType::Q6_K, gguf::GgmlType::Q8_0};
inline constexpr uint32_t kAllQ8Types = (1u << std::size(kQ8Types)) - 1;

// The types 8-bit without GPUNVME_MATVEC_Q8: those whose 8-bit kernels beat their FP32 ones on an H200
// (all three since Q4_K's lean loop, gpu_rows_q4k_q8.cuh: docs/performance.md §8).
inline constexpr gguf::GgmlType kDefaultQ8TypeList[] = {gguf::GgmlType::Q4_K, gguf::GgmlType::Q6_K, gguf::GgmlType::Q8_0};
constexpr uint32_t q8_type_bits(std::span<const gguf::GgmlType> types) {
  uint32_t v = 0;
  for (gguf::GgmlType t : types)
    for (size_t i = 0; i < std::size(kQ8Types); ++i)
      if (kQ8Types[i] == t) v |= 1u << i;
  return v;
}
inline constexpr uint32_t kDefaultQ8Types = q8_type_bits(kDefaultQ8TypeList);

// Bit i for kQ8Types[i]: "1" every type, "0" or "" none, else a comma-separated list of their names in
// any case (q6_k,q8_0). Throws std::invalid_argument naming GPUNVME_MATVEC_Q8 for an unknown name or an
// empty item.
uint32_t parse_q8_types(std::string_view text);

// GPUNVME_MATVEC_Q8's value (null where unset): kDefaultQ8Types where unset or empty, else parse_q8_types.
uint32_t q8_types_setting(const char* env);

}  // namespace gpunvme::llm
