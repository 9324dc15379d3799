// The CPU tests' greedy run: `steps` tokens from token 1 at position 0, each the argmax of the previous
// step's logits, every step's logits concatenated (what the tests compare to the bit), then finish().
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "examples/llm/engine/executor.h"

namespace gpunvme::test {

inline std::vector<float> greedy_logits(llm::Executor& ex, uint32_t steps) {
  std::vector<float> all;
  uint32_t tok = 1;
  for (uint32_t pos = 0; pos < steps; ++pos) {
    const auto logits = ex.step(tok, pos);
    all.insert(all.end(), logits.begin(), logits.end());
    tok = uint32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  ex.finish();
  return all;
}

}  // namespace gpunvme::test
