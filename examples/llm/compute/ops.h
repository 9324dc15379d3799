// The forward pass's arithmetic, one element or one row at a time, written once for the CPU and the
// GPU: the CPU executor (cpu_forward.cpp) loops over these, the GPU kernels give each row or head to
// a warp. Formulas follow llama.cpp's graph builders (llama-model.cpp) for llama, qwen2 and gemma3.
#pragma once
#include <cmath>
#include <cstdint>

#include "examples/llm/model/config.h"
#include "examples/llm/quant/dequant.h"

namespace gpunvme::llm {

// Row r of a matrix times x: the matrix-vector product's element, dequantizing 32 weights at a time.
GPUNVME_HD inline float dot_row(GgmlType t, const void* row, uint64_t cols, const float* x) {
  float sum = 0.0f;
  float w[kGroup];
  for (uint64_t g = 0; g < cols / kGroup; ++g) {
    dequant_group(t, row, g, w);
    float part = 0.0f;
    for (int l = 0; l < kGroup; ++l) part += w[l] * x[g * kGroup + uint64_t(l)];
    sum += part;
  }
  return sum;
}

GPUNVME_HD inline float silu(float x) { return x / (1.0f + expf(-x)); }

// GELU, tanh approximation (ggml_gelu): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
GPUNVME_HD inline float gelu(float x) {
  const float k = 0.7978845608028654f;
  return 0.5f * x * (1.0f + tanhf(k * x * (1.0f + 0.044715f * x * x)));
}

GPUNVME_HD inline float act(FfnAct a, float x) { return a == FfnAct::kGelu ? gelu(x) : silu(x); }

// RoPE of one pair of a head: rotates (a, b) by pos * base^(-2i/n_rot), i the pair's index.
GPUNVME_HD inline void rope_pair(float& a, float& b, uint32_t i, uint32_t n_rot, uint32_t pos, float base) {
  const float theta = float(pos) * powf(base, -2.0f * float(i) / float(n_rot));
  const float c = cosf(theta), s = sinf(theta);
  const float x0 = a, x1 = b;
  a = x0 * c - x1 * s;
  b = x0 * s + x1 * c;
}

// Rotates pair i (< n_rot / 2) of a head in place; the layout decides which two elements form it. Only
// the head's first n_rot dimensions rotate, as if the head were n_rot long; the rest pass unchanged
// (partial rotary: ggml's rope with n_dims = n_rot < the head size).
GPUNVME_HD inline void rope_pair_of(float* h, uint32_t i, uint32_t n_rot, uint32_t pos, float base, RopeLayout layout) {
  if (layout == RopeLayout::kNorm) rope_pair(h[2 * i], h[2 * i + 1], i, n_rot, pos, base);
  else rope_pair(h[i], h[i + n_rot / 2], i, n_rot, pos, base);
}

// Rotates one head in place (ModelConfig::n_rot of its dimensions).
GPUNVME_HD inline void rope_head(float* h, uint32_t n_rot, uint32_t pos, float base, RopeLayout layout) {
  for (uint32_t i = 0; i < n_rot / 2; ++i) rope_pair_of(h, i, n_rot, pos, base, layout);
}

}  // namespace gpunvme::llm
