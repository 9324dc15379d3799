// gpt-oss (llama.cpp's LLM_ARCH_OPENAI_MOE: src/models/openai-moe-iswa.cpp, its hparams and tensors):
// NEOX RoPE, YaRN-scaled as the GGUF's rope.scaling.* keys say; Q, K, V and output biases; a learned
// attention-sink logit per head; sliding-window attention (attention.sliding_window) on the layers of
// llama.cpp's pattern (attention.sliding_window_pattern, 2 without the key: even layers windowed, odd ones
// global), the windowed layers at rope.freq_base_swa where present; post_attention_norm as the FFN's input
// norm; every layer routed, the router and each expert with biases, top expert_used_count of the raw
// router logits and a softmax over those (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT), the experts'
// clamped SwiGLU (compute/ops.h's swiglu_oai), expert_feed_forward_length wide. Its attention scale is
// 1 / sqrt(n_rot) (= the head size: its graph reshapes heads by n_rot, so no partial rotary).
#include "examples/llm/arch/arch.h"

#include <cmath>
#include <stdexcept>

namespace gpunvme::llm {
namespace {

// <arch>.rope.scaling.* as llama.cpp's loader and context read them: type (default linear; none never
// scales), factor (or the older rope.scale_linear; 0 or absent: 1), original_context_length (default
// context_length), attn_factor (default 1). YaRN's ext_factor is 1; its attention factor is
// get_mscale(factor) / (1 + 0.1 ln factor) * rope.scaling.attn_factor (llama-context.cpp, which cancels
// the factor ggml's rope applies again). yarn_log_multiplier (DeepSeek's) is refused: not computed here.
void read_rope_scaling(ModelConfig& c, const KeyReader& r) {
  const gguf::Value* type = r.md.find(r.prefix + "rope.scaling.type");
  const std::string kind = type ? type->as_string() : "linear";
  if (kind != "none" && kind != "linear" && kind != "yarn")
    throw std::runtime_error(r.prefix + "rope.scaling.type = '" + kind + "' is not supported (none, linear or yarn)");
  if (r.has("rope.scaling.yarn_log_multiplier"))
    throw std::runtime_error(r.prefix + "rope.scaling.yarn_log_multiplier is not supported by the engine");
  const float factor = r.has("rope.scaling.factor") ? r.f32_or("rope.scaling.factor", 1.0f) : r.f32_or("rope.scale_linear", 1.0f);
  YarnScaling& y = c.yarn;
  y.freq_scale = kind == "none" ? 1.0f : 1.0f / factor;
  y.n_ctx_orig = r.u32_or("rope.scaling.original_context_length", c.n_ctx_train);
  y.attn_factor = 1.0f;
  if (kind == "yarn") {
    y.ext_factor = 1.0f;
    const float f = 1.0f / y.freq_scale;
    const float mscale = f <= 1.0f ? 1.0f : 0.1f * std::log(f) + 1.0f;  // get_mscale(factor, 1)
    y.attn_factor = mscale * (1.0f / (1.0f + 0.1f * std::log(f)));
  }
  y.attn_factor *= r.f32_or("rope.scaling.attn_factor", 1.0f);
}

void gpt_oss(ModelConfig& c, const KeyReader& r) {
  c.rope = RopeLayout::kNeox;
  c.n_expert = r.u32("expert_count");
  c.n_expert_used = r.u32("expert_used_count");
  c.n_ff = r.u32("expert_feed_forward_length");
  c.n_ff_from = r.prefix + "expert_feed_forward_length = " + std::to_string(c.n_ff);
  c.swa_window = r.u32("attention.sliding_window");
  if (c.swa_window > c.n_ctx_train)
    throw std::runtime_error(r.prefix + "attention.sliding_window = " + std::to_string(c.swa_window) + " is larger than " +
                             r.prefix + "context_length = " + std::to_string(c.n_ctx_train) +
                             ": a window cannot be wider than the context (a damaged or mislabelled GGUF)");
  c.swa_period = r.u32_or("attention.sliding_window_pattern", 2);
  c.rope_base_swa = r.f32_or("rope.freq_base_swa", c.rope_base);
  read_rope_scaling(c, r);
  c.act = FfnAct::kSwigluOai;
  c.gating = Gating::kSoftmaxSelected;
  c.ffn_norm = "post_attention_norm";
  c.sinks = c.biases = true;
}

}  // namespace

extern const ArchRules kGptOssRules{"gpt-oss", Arch::kGptOss, "gpt-oss", gpt_oss};

}  // namespace gpunvme::llm
