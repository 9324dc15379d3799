// Helpers of the 8-bit-activation tests (test_llm_matvec_q8.cpp, test_llm_matmul_q8_batch.cpp): inputs
// shaped like activations, and the bit-for-bit comparison.
#pragma once
#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace gpunvme::test {

// n normal values with an outlier, as real activations have: its 8-bit block's scale is coarse.
inline std::vector<float> random_x(uint64_t n, std::mt19937& rng) {
  std::vector<float> x(n);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (float& e : x) e = d(rng);
  x[n / 3] = 40.0f;
  return x;
}

// got and ref the same floats, bit for bit (the first difference captured).
inline void require_bits(const std::vector<float>& got, const std::vector<float>& ref) {
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i, got[i], ref[i]);
    REQUIRE(std::memcmp(&got[i], &ref[i], sizeof(float)) == 0);
  }
}

}  // namespace gpunvme::test
