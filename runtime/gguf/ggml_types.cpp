#include "runtime/gguf/ggml_types.h"

namespace gpunvme::gguf {

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type_id) {
  for (const auto& t : kGgmlTypes) {
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

const std::array<GgmlTypeInfo, 34>& ggml_all_types() { return kGgmlTypes; }

}  // namespace gpunvme::gguf
