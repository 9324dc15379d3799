// Where a model's weights stop being numbers: after the generation loop finds logits that are not
// finite (generate.h, NonFiniteLogits), the tensors are read back from the device in file order and
// dequantized with the forward pass's own routines until one holds a NaN or an Inf. Only on that error
// path: a healthy run never pays for it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "examples/llm/engine/model_on_device.h"

namespace gpunvme::llm {

struct NonFiniteWeight {
  std::string tensor;    // the first tensor (in file order) holding a NaN or an Inf
  uint64_t element = 0;  // its first such element (flat index)
  float value = 0;
};

// Scans at most `max_bytes` of tensor data (whole tensors; the types the engine computes).
// nullopt: none found in what was scanned; `scanned_all` says whether that was every tensor.
std::optional<NonFiniteWeight> find_non_finite_weight(const ModelOnDevice& m, uint64_t max_bytes, bool* scanned_all);

}  // namespace gpunvme::llm
