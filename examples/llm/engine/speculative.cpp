#include "examples/llm/engine/speculative.h"

#include <stdexcept>
#include <string>

namespace gpunvme::llm {

Verdict verify(std::span<const uint32_t> draft, std::span<const float> rows, uint32_t n_vocab,
               const std::function<uint32_t(std::span<const float>)>& pick) {
  if (rows.size() != (draft.size() + 1) * size_t(n_vocab))
    throw std::logic_error("verify: " + std::to_string(rows.size()) + " logits for " + std::to_string(draft.size() + 1) + " positions");
  Verdict v;
  for (size_t i = 0; i <= draft.size(); ++i) {
    const uint32_t y = pick(rows.subspan(i * n_vocab, n_vocab));
    v.tokens.push_back(y);
    if (i == draft.size() || y != draft[i]) break;
    ++v.accepted;
  }
  return v;
}

}  // namespace gpunvme::llm
