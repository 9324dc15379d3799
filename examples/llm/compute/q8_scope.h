// The 8-bit-activation types (gpu_matmul.h's gpu_set_matvec_q8_types) for a scope, the previous ones back
// after it: tests and benches that hold the FP32 kernels (0) or the 8-bit ones whatever the default.
#pragma once
#include <cstdint>

#include "examples/llm/compute/gpu_matmul.h"

namespace gpunvme::llm {

class ScopedQ8Types {
 public:
  explicit ScopedQ8Types(uint32_t types) : was_(gpu_matvec_q8_types()) { gpu_set_matvec_q8_types(types); }
  ~ScopedQ8Types() { gpu_set_matvec_q8_types(was_); }
  ScopedQ8Types(const ScopedQ8Types&) = delete;
  ScopedQ8Types& operator=(const ScopedQ8Types&) = delete;

 private:
  uint32_t was_;
};

}  // namespace gpunvme::llm
