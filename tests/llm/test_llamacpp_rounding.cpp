// The diagnostic roundings of llama.cpp's CPU activations (examples/llm/quant/llamacpp_rounding.h): the
// Q8_0 round trip on blocks whose quants are known by hand (ggml-cpu's x86 rule: x * (127 / amax), ties
// to even, d as an IEEE half), the types each setting rounds for, and the environment variable's values.
#include <catch2/catch_test_macros.hpp>

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "examples/llm/quant/llamacpp_rounding.h"

using namespace gpunvme::llm;

TEST_CASE("Q8_0 round trip: quants by hand, d as a half, ties to even, a zero block stays zero") {
  std::vector<float> x(64), y(64);
  // Block 0: amax 127 (d = 1, exact as a half), so each value rounds to an integer: 2.5 -> 2 and 3.5 -> 4
  // (ties to even, quantize_row_q8_0_ref's roundf would give 3), -2.5 -> -2, 0.4 -> 0, 126.6 -> 127.
  const float in[8] = {127.0f, 2.5f, 3.5f, -2.5f, 0.4f, 126.6f, -127.0f, 1.49f};
  const float want[8] = {127.0f, 2.0f, 4.0f, -2.0f, 0.0f, 127.0f, -127.0f, 1.0f};
  for (int j = 0; j < 8; ++j) x[j] = in[j];
  // Block 1 all zero: d = 0 and the quants 0, never NaN.
  round_to_q8_0(x.data(), 64, y.data());
  for (int j = 0; j < 8; ++j) CHECK(y[j] == want[j]);
  for (int j = 8; j < 32; ++j) CHECK(y[j] == 0.0f);
  for (int j = 32; j < 64; ++j) CHECK(y[j] == 0.0f);
  // amax 1: d = 1/127 rounds to the half 0x2008 (0.0078735...), so 1 comes back as 127 * half(1/127),
  // not 1 (the integer dot stands for q * half(d)); 0.5 is 63.5 -> 64 (even).
  std::vector<float> a(32, 0.0f), b(32);
  a[0] = 1.0f;
  a[1] = 0.5f;
  round_to_q8_0(a.data(), 32, b.data());
  const float d_half = float(static_cast<_Float16>(1.0f / 127.0f));
  CHECK(d_half != 1.0f / 127.0f);
  CHECK(b[0] == 127.0f * d_half);
  CHECK(b[1] == 64.0f * d_half);
  CHECK(b[2] == 0.0f);
}

TEST_CASE("each setting rounds for the types llama.cpp's CPU backend rounds for, and no other") {
  using T = GgmlType;
  const LlamacppRounding none{}, mxfp4{.q8_0_mxfp4 = true},
      all{.q8_0_mxfp4 = true, .q8_0_legacy = true, .f16_weights = true, .attention = true};
  for (T t : {T::F32, T::F16, T::BF16, T::Q8_0, T::Q4_0, T::Q5_0, T::Q4_K, T::Q5_K, T::Q6_K, T::MXFP4})
    CHECK_FALSE((none.q8_0_for(t) || none.f16_for(t)));
  CHECK(mxfp4.q8_0_for(T::MXFP4));
  CHECK_FALSE(mxfp4.q8_0_for(T::Q8_0));
  for (T t : {T::Q8_0, T::Q4_0, T::Q5_0, T::MXFP4}) CHECK(all.q8_0_for(t));
  for (T t : {T::F32, T::F16, T::BF16, T::Q4_K, T::Q5_K, T::Q6_K}) CHECK_FALSE(all.q8_0_for(t));
  CHECK(all.f16_for(T::F16));
  CHECK_FALSE(all.f16_for(T::F32));
  CHECK_FALSE(all.f16_for(T::BF16));
}

TEST_CASE("GPUNVME_LLM_LLAMACPP_ROUNDING: off unless set, each value, anything else refused naming the values") {
  unsetenv(kLlamacppRoundingEnv);
  CHECK_FALSE(llamacpp_rounding_from_env().q8_0_mxfp4);
  setenv(kLlamacppRoundingEnv, "0", 1);
  CHECK_FALSE(llamacpp_rounding_from_env().attention);
  setenv(kLlamacppRoundingEnv, "mxfp4", 1);
  CHECK(llamacpp_rounding_from_env().q8_0_mxfp4);
  CHECK_FALSE(llamacpp_rounding_from_env().attention);
  setenv(kLlamacppRoundingEnv, "mxfp4-attn", 1);
  CHECK((llamacpp_rounding_from_env().q8_0_mxfp4 && llamacpp_rounding_from_env().attention));
  CHECK_FALSE(llamacpp_rounding_from_env().q8_0_legacy);
  setenv(kLlamacppRoundingEnv, "all", 1);
  const LlamacppRounding r = llamacpp_rounding_from_env();
  CHECK((r.q8_0_mxfp4 && r.q8_0_legacy && r.f16_weights && r.attention));
  for (const char* bad : {"1", "MXFP4", "mxfp4,attn", " all"}) {
    setenv(kLlamacppRoundingEnv, bad, 1);
    CHECK_THROWS_AS(llamacpp_rounding_from_env(), std::invalid_argument);
  }
  unsetenv(kLlamacppRoundingEnv);
}
