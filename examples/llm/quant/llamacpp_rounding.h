// The roundings llama.cpp's CPU backend applies to activations and the engine does not, as a diagnostic
// (off by default; GPUNVME_LLM_LLAMACPP_ROUNDING, read by the CPU executor). ggml-cpu multiplies a weight
// row by activations converted to the row type's vec_dot_type first: Q8_0 blocks for Q4_0, Q5_0, Q8_0 and
// MXFP4 weights, IEEE halves for F16 weights; and its attention (no flash attention, the f16 K/V cache)
// takes Q and the softmax weights as halves (vec_dot_type F16 of the cache). The engine keeps all of these
// in float. With the switch the CPU path takes the values llama.cpp's products take, so a divergence from
// llama.cpp can be laid to these roundings or not (docs/engine.md, gpt-oss, has the measurements; the
// reference check runs gpt-oss-mxfp4-f32 with it). Q8_0 as ggml-cpu's x86 quantize_row_q8_0 rounds (the
// AVX2 build the reference came from): per 32 values d = amax / 127 stored as an IEEE half, the quants
// x * (127 / amax) rounded to nearest, ties to even; the integer dot then stands for q * half(d).
// (quantize_row_q8_0_ref multiplies by 1 / d and rounds ties away from zero: a quant apart now and then;
// the reference check's counts for gpt-oss-mxfp4-f32 are the same with either.) Not done: the k-quants'
// Q8_K and BF16's rounding. Host only.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "examples/llm/quant/blocks.h"

namespace gpunvme::llm {

struct LlamacppRounding {
  bool q8_0_mxfp4 = false;   // Q8_0 activations before MXFP4 products
  bool q8_0_legacy = false;  // ... before Q4_0, Q5_0 and Q8_0 products
  bool f16_weights = false;  // half activations before F16 products
  bool attention = false;    // Q and the softmax weights as halves in attention

  // Activations of a product with weights of type t are rounded to Q8_0.
  bool q8_0_for(GgmlType t) const {
    return t == GgmlType::MXFP4 ? q8_0_mxfp4 : q8_0_legacy && (t == GgmlType::Q4_0 || t == GgmlType::Q5_0 || t == GgmlType::Q8_0);
  }
  bool f16_for(GgmlType t) const { return f16_weights && t == GgmlType::F16; }
};

inline constexpr const char* kLlamacppRoundingEnv = "GPUNVME_LLM_LLAMACPP_ROUNDING";

// The setting from the environment: unset, empty or "0" is none; "mxfp4", "attn", "mxfp4-attn" or "all";
// anything else is refused.
inline LlamacppRounding llamacpp_rounding_from_env() {
  const char* v = std::getenv(kLlamacppRoundingEnv);
  const std::string s = v ? v : "";
  if (s.empty() || s == "0") return {};
  if (s == "mxfp4") return {.q8_0_mxfp4 = true};
  if (s == "attn") return {.attention = true};
  if (s == "mxfp4-attn") return {.q8_0_mxfp4 = true, .attention = true};
  if (s == "all") return {.q8_0_mxfp4 = true, .q8_0_legacy = true, .f16_weights = true, .attention = true};
  throw std::invalid_argument(std::string(kLlamacppRoundingEnv) + "=" + s +
                              ": give mxfp4 (Q8_0 activations before MXFP4 products, as llama.cpp's CPU backend "
                              "takes them), attn (Q and the attention weights as halves), mxfp4-attn (both), all (also "
                              "Q8_0 before Q4_0/Q5_0/Q8_0 and halves before F16 products), or 0 (none, the default)");
}

// y[0, n) = x rounded to Q8_0 blocks of kQK and back (n a multiple of kQK; y may be x).
inline void round_to_q8_0(const float* x, uint64_t n, float* y) {
  for (uint64_t b = 0; b < n; b += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[b + j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float d_half = float(static_cast<_Float16>(d));  // the block's stored scale
    for (int j = 0; j < kQK; ++j) y[b + j] = float(static_cast<int8_t>(std::nearbyint(x[b + j] * id))) * d_half;
  }
}

inline float round_to_half(float x) { return float(static_cast<_Float16>(x)); }

inline void round_to_half(const float* x, uint64_t n, float* y) {
  for (uint64_t i = 0; i < n; ++i) y[i] = round_to_half(x[i]);
}

}  // namespace gpunvme::llm
