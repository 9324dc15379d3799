// The 8-bit-activation dot products' CPU side (examples/llm/quant/q8_dot.h, issue 36): x's quantisation
// by hand (amax / 127, round half away from zero, a zero block all zeros), the signed byte products, and
// the kernel's twin (q4k_row_dot_q8, q8_0_row_dot_q8: the slices, nibbles, scales and mins in the
// kernel's lane order) against the exact dot product of the dequantised weights and the dequantised
// 8-bit x, in double: float rounding apart, the same number. The GPU's bits are held to the twin by
// tests/gpu/test_llm_matvec_q8.cpp.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <cmath>
#include <stdexcept>
#include <cstring>
#include <random>
#include <vector>

#include "examples/llm/compute/q8_types.h"
#include "examples/llm/quant/q8_dot.h"
#include "tests/llm/tiny_model.h"

using namespace gpunvme::llm;

TEST_CASE("8-bit x: blocks by hand (amax / 127, ties away from zero, a zero block)") {
  std::vector<float> x(64, 0.0f);
  const float in[6] = {127.0f, 2.5f, -2.5f, 0.49f, -126.5f, 1.5f};
  const int8_t want[6] = {127, 3, -3, 0, -127, 2};
  for (int j = 0; j < 6; ++j) x[j] = in[j];
  const Q8Vector q = q8_quantize(x.data(), 64);
  REQUIRE(q.d[0] == 1.0f);
  for (int j = 0; j < 6; ++j) REQUIRE(q.q[j] == want[j]);
  REQUIRE(q.d[1] == 0.0f);  // block 1 is all zeros
  for (int j = 32; j < 64; ++j) REQUIRE(q.q[j] == 0);
  REQUIRE(dot4_i8(0x80FF0102u, 0x7F02FF03u, 5) == 5 + 2 * 3 + 1 * -1 + -1 * 2 + -128 * 127);
}

TEST_CASE("8-bit x twin: the exact product of the dequantised weights and x's 8-bit values") {
  const GgmlType t = GENERATE(GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0);
  const uint32_t cols = GENERATE(256u, 4096u, 14336u);
  std::mt19937 rng(cols + uint32_t(t));
  const uint32_t rows = 24;
  const auto w = test::random_rows(t, cols, rows, rng);
  const uint64_t rb = w.size() / rows;
  std::vector<float> x(cols);
  std::normal_distribution<float> d;
  for (float& e : x) e = d(rng);
  const Q8Vector q = q8_quantize(x.data(), cols);
  std::vector<float> wr(cols);
  for (uint32_t r = 0; r < rows; ++r) {
    const uint8_t* row = w.data() + r * rb;
    for (uint32_t g = 0; g < cols / kGroup; ++g) dequant_group(t, row, g, wr.data() + g * kGroup);
    double exact = 0.0, mag = 0.0;
    for (uint32_t i = 0; i < cols; ++i) {
      const double xq = double(q.q[i]) * q.d[i / kQ8Block];
      exact += double(wr[i]) * xq;
      mag += std::fabs(double(wr[i]) * xq);
    }
    const float got = row_dot_q8(t, row, cols, q);
    CAPTURE(gpunvme::gguf::ggml_type_name(uint32_t(t)), cols, r, got, exact, mag);
    REQUIRE(std::fabs(double(got) - exact) <= 1e-6 * mag);
  }
}

TEST_CASE("GPUNVME_MATVEC_Q8's grammar: 1, 0, a list of type names in any case; an unknown name or empty item refused") {
  REQUIRE(parse_q8_types("1") == kAllQ8Types);
  REQUIRE(parse_q8_types("0") == 0);
  REQUIRE(parse_q8_types("") == 0);
  // Unset (or empty): the default list, held in one place.
  REQUIRE(q8_types_setting(nullptr) == kDefaultQ8Types);
  REQUIRE(q8_types_setting("") == kDefaultQ8Types);
  REQUIRE(q8_types_setting("0") == 0);
  REQUIRE(q8_types_setting("Q8_0") == 0b100u);
  REQUIRE(parse_q8_types("q6_k,q8_0") == 0b110u);  // kQ8Types: Q4_K, Q6_K, Q8_0
  REQUIRE(parse_q8_types("Q4_K") == 0b001u);
  REQUIRE(parse_q8_types("q8_0,q4_k,q6_k") == kAllQ8Types);
  REQUIRE_THROWS_WITH(parse_q8_types("q6_k,q5_k"),
                      Catch::Matchers::Equals("GPUNVME_MATVEC_Q8: 'Q5_K' is not 1, 0 or one of q4_k, q6_k, q8_0"));
  REQUIRE_THROWS_AS(parse_q8_types("q6_k,,q8_0"), std::invalid_argument);
  REQUIRE_THROWS_AS(parse_q8_types("q6_k,"), std::invalid_argument);
}
