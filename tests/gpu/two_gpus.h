// What the several-GPU tests share (test_llm_multi_gpu.cpp, test_llm_multi_gpu_passes.cpp): the skip
// without 2 GPUs (the lead's 2-GPU machine runs them), and every step's logits held to one GPU's bits.
#pragma once
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime.h>

#include <vector>

#include "gpu_rig.h"
#include "tests/llm/tiny_model.h"

#define REQUIRE_TWO_GPUS()                                                                        \
  do {                                                                                            \
    REQUIRE_GPU();                                                                                \
    int n_ = 0;                                                                                   \
    if (cudaGetDeviceCount(&n_) != cudaSuccess || n_ < 2) SKIP("needs 2 GPUs, CUDA sees " << n_); \
  } while (0)

namespace gpunvme::test {

// Every step's logits with the bits of the same step on one GPU.
inline void check_steps(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("step " << i);
    CHECK(llm::test::same_bits(got[i], want[i]));
  }
}

}  // namespace gpunvme::test
