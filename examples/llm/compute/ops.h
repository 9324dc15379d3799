// The forward pass's arithmetic, one element or one row at a time, written once for the CPU and the
// GPU: the CPU executor (cpu_forward.cpp) loops over these, the GPU kernels give each row or head to
// a warp. Formulas follow llama.cpp's graph builders (src/models/*.cpp) and ggml-cpu's operations.
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

// gpt-oss's clamped SwiGLU (llama.cpp's LLM_FFN_SWIGLU_OAI_MOE: ggml_swiglu_oai(gate, up, alpha 1.702,
// limit 7), ggml-cpu's swiglu_oai: x = min(gate, limit), y = clamp(up, -limit, limit),
// x / (1 + exp(alpha * -x)) * (y + 1)). The gate is capped from above only, the up half on both sides and
// offset by 1. The comparisons are std::min's and std::clamp's (a NaN passes through).
inline constexpr float kSwigluOaiAlpha = 1.702f, kSwigluOaiLimit = 7.0f;
GPUNVME_HD inline float swiglu_oai(float gate, float up) {
  const float x = kSwigluOaiLimit < gate ? kSwigluOaiLimit : gate;
  const float y = up < -kSwigluOaiLimit ? -kSwigluOaiLimit : (kSwigluOaiLimit < up ? kSwigluOaiLimit : up);
  return x / (1.0f + expf(kSwigluOaiAlpha * -x)) * (y + 1.0f);
}

// One element of a gated FFN: act(gate) * up, or gpt-oss's clamped form of both.
GPUNVME_HD inline float glu(FfnAct a, float gate, float up) {
  return a == FfnAct::kSwigluOai ? swiglu_oai(gate, up) : act(a, gate) * up;
}

// A layer's RoPE: its frequency base and the YaRN scaling (ggml's rope_ext arguments). Without scaling
// (freq_scale 1, ext_factor 0, attn_factor 1) it is plain RoPE to the bit: theta * 1 and cos * 1 are exact.
struct RopeParams {
  GPUNVME_HD RopeParams(float b = 10000.0f) : base(b) {}  // plain RoPE at base b
  float base;
  float freq_scale = 1.0f;   // 1 / rope.scaling.factor
  float ext_factor = 0.0f;   // YaRN's extrapolation mix: 1 for YaRN, else 0
  float attn_factor = 1.0f;  // llama.cpp's cparams.yarn_attn_factor
  float corr_lo = 0.0f, corr_hi = 0.0f;  // ggml_rope_yarn_corr_dims: the pairs between them are ramped
};

// ggml_rope_yarn_corr_dim: the pair index at which a frequency turns `n_rot_turns` times over n_ctx_orig.
inline float yarn_corr_dim(uint32_t n_dims, uint32_t n_ctx_orig, float n_rot_turns, float base) {
  return float(n_dims) * logf(float(n_ctx_orig) / (n_rot_turns * 2.0f * 3.14159265358979323846f)) / (2.0f * logf(base));
}

// The layer's RopeParams (base: the layer's; the scaling from the config), the correction dims as
// ggml_rope_yarn_corr_dims takes them: floor at beta_fast, ceil at beta_slow, within [0, n_rot - 1].
inline RopeParams rope_params(const ModelConfig& c, float base) {
  RopeParams p(base);
  p.freq_scale = c.yarn.freq_scale;
  p.ext_factor = c.yarn.ext_factor;
  p.attn_factor = c.yarn.attn_factor;
  if (p.ext_factor != 0.0f) {
    p.corr_lo = fmaxf(0.0f, floorf(yarn_corr_dim(c.n_rot, c.yarn.n_ctx_orig, c.yarn.beta_fast, base)));
    p.corr_hi = fminf(float(c.n_rot - 1), ceilf(yarn_corr_dim(c.n_rot, c.yarn.n_ctx_orig, c.yarn.beta_slow, base)));
  }
  return p;
}

// RoPE of one pair of a head: rotates (a, b) by pos * base^(-2i/n_rot), i the pair's index, YaRN-scaled as
// ggml's rope_yarn: the interpolated angle (freq_scale * theta) mixed with the original by the ramp over
// the correction dims (1 below corr_lo: the original, 0 above corr_hi: the interpolated), and cos and sin
// scaled by attn_factor * (1 + 0.1 ln(1 / freq_scale)).
GPUNVME_HD inline void rope_pair(float& a, float& b, uint32_t i, uint32_t n_rot, uint32_t pos, const RopeParams& r) {
  const float theta_extrap = float(pos) * powf(r.base, -2.0f * float(i) / float(n_rot));
  const float theta_interp = r.freq_scale * theta_extrap;
  float theta = theta_interp, mscale = r.attn_factor;
  if (r.ext_factor != 0.0f) {
    const float y = (float(i) - r.corr_lo) / fmaxf(0.001f, r.corr_hi - r.corr_lo);  // rope_yarn_ramp
    const float ramp_mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * r.ext_factor;
    theta = theta_interp * (1.0f - ramp_mix) + theta_extrap * ramp_mix;
    mscale *= 1.0f + 0.1f * logf(1.0f / r.freq_scale);
  }
  const float c = cosf(theta) * mscale, s = sinf(theta) * mscale;
  const float x0 = a, x1 = b;
  a = x0 * c - x1 * s;
  b = x0 * s + x1 * c;
}

// Rotates pair i (< n_rot / 2) of a head in place; the layout decides which two elements form it. Only
// the head's first n_rot dimensions rotate, as if the head were n_rot long; the rest pass unchanged
// (partial rotary: ggml's rope with n_dims = n_rot < the head size).
GPUNVME_HD inline void rope_pair_of(float* h, uint32_t i, uint32_t n_rot, uint32_t pos, const RopeParams& r, RopeLayout layout) {
  if (layout == RopeLayout::kNorm) rope_pair(h[2 * i], h[2 * i + 1], i, n_rot, pos, r);
  else rope_pair(h[i], h[i + n_rot / 2], i, n_rot, pos, r);
}

// Rotates one head in place (ModelConfig::n_rot of its dimensions).
GPUNVME_HD inline void rope_head(float* h, uint32_t n_rot, uint32_t pos, const RopeParams& r, RopeLayout layout) {
  for (uint32_t i = 0; i < n_rot / 2; ++i) rope_pair_of(h, i, n_rot, pos, r, layout);
}

// One head's softmax with an attention sink (ggml_soft_max_ext with sinks): the sink's logit joins the
// maximum and the denominator and takes no value. `sink` is -INFINITY without one (exp gives 0 then).
GPUNVME_HD inline float with_sink_max(float mx, float sink) { return fmaxf(mx, sink); }
GPUNVME_HD inline float with_sink_sum(float sum, float sink, float mx) { return sink == -INFINITY ? sum : sum + expf(sink - mx); }

}  // namespace gpunvme::llm
