#include "examples/llm/compute/q8_types.h"

#include <cctype>
#include <stdexcept>
#include <string>

#include "host/text/lists.h"

namespace gpunvme::llm {

uint32_t parse_q8_types(std::string_view text) {
  if (text == "1") return kAllQ8Types;
  if (text.empty() || text == "0") return 0;
  uint32_t v = 0;
  for (std::string name : text::split_list("GPUNVME_MATVEC_Q8", text)) {
    for (char& c : name) c = char(std::toupper(static_cast<unsigned char>(c)));
    int bit = -1;
    for (size_t i = 0; i < std::size(kQ8Types); ++i)
      if (gguf::ggml_type_name(uint32_t(kQ8Types[i])) == name) bit = int(i);
    if (bit < 0) throw std::invalid_argument("GPUNVME_MATVEC_Q8: '" + name + "' is not 1, 0 or one of q4_k, q6_k, q8_0");
    v |= 1u << bit;
  }
  return v;
}

uint32_t q8_types_setting(const char* env) {
  return env == nullptr || *env == '\0' ? kDefaultQ8Types : parse_q8_types(env);
}

}  // namespace gpunvme::llm
