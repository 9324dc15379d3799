// What the engine needs to know about a model, read once from its GGUF metadata and checked: the
// architecture, the shapes, and the per-architecture rules (RoPE layout, sliding-window layers,
// embedding scale, attention scale) as data, so the forward pass has no architecture names in it.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/gguf/gguf_file.h"

namespace gpunvme::llm {

// One per file of examples/llm/arch/, whose rules fill the config from the architecture's keys.
enum class Arch { kLlama, kQwen2, kGemma3, kQwen3, kQwen3Moe, kGptOss };

// How RoPE pairs the dimensions of a head: kNorm rotates (x[2i], x[2i+1]) (llama), kNeox rotates
// (x[i], x[i + d/2]) (qwen2, gemma3, qwen3, qwen3moe). llama.cpp's LLAMA_ROPE_TYPE_NORM / _NEOX.
enum class RopeLayout { kNorm, kNeox };
// The feed-forward activation: SiLU (SwiGLU: llama, qwen2), GELU, tanh form (GeGLU: gemma3), or gpt-oss's
// clamped SwiGLU (compute/ops.h's swiglu_oai).
enum class FfnAct { kSilu, kGelu, kSwigluOai };
// How the router's logits become the selected experts' weights (llama.cpp's expert gating functions):
// kSoftmax: softmax over all experts, top k, renormalised (Mixtral, qwen3moe); kSoftmaxSelected: top k of
// the raw logits, softmax over those k (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT: gpt-oss).
enum class Gating { kSoftmax, kSoftmaxSelected };

// RoPE scaling as llama.cpp's context takes it from <arch>.rope.scaling.* (compute/ops.h's rope_params uses
// it): none by default.
struct YarnScaling {
  float freq_scale = 1.0f;   // 1 / rope.scaling.factor
  float ext_factor = 0.0f;   // 1 where rope.scaling.type is yarn
  float attn_factor = 1.0f;  // cparams.yarn_attn_factor
  float beta_fast = 32.0f, beta_slow = 1.0f;  // llama.cpp's defaults (no gpt-oss key sets them)
  uint32_t n_ctx_orig = 0;   // rope.scaling.original_context_length, else context_length
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;
  uint32_t n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  uint32_t n_ff = 0;               // the FFN's width; in an MoE model each expert's (qwen3moe: expert_feed_forward_length)
  std::string n_ff_from;           // the key(s) n_ff was read from, for the shape errors of the FFN tensors
  uint32_t n_rot = 0;              // RoPE rotates a head's first n_rot dimensions (<arch>.rope.dimension_count)
  uint32_t n_vocab = 0, n_ctx_train = 0;
  uint32_t n_expert = 0, n_expert_used = 0;  // 0: dense
  float rms_eps = 1e-5f;
  RopeLayout rope = RopeLayout::kNorm;
  float rope_base = 10000.0f;      // global-attention layers
  float rope_base_swa = 10000.0f;  // sliding-window layers (gemma3)
  uint32_t swa_window = 0;         // 0: no sliding window
  uint32_t swa_period = 0;         // layer il is sliding-window unless il % period == period - 1
  float embd_scale = 1.0f;         // token embeddings are multiplied by this (gemma3: sqrt(n_embd))
  float attn_scale = 1.0f;         // q·k is multiplied by this
  FfnAct act = FfnAct::kSilu;
  Gating gating = Gating::kSoftmax;
  YarnScaling yarn;
  const char* ffn_norm = "ffn_norm";  // the FFN's input norm tensor (gpt-oss: post_attention_norm)
  bool sinks = false;              // a learned attention-sink logit per head (gpt-oss: attn_sinks)
  bool biases = false;             // Q, K, V and output biases, router and expert biases required (gpt-oss)
  bool qk_norm = false;            // per-head RMS norm of Q and K, before RoPE (gemma3, qwen3, qwen3moe)
  bool post_norms = false;         // RMS norm after attention and after the FFN (gemma3)

  bool is_moe() const { return n_expert > 0; }
  bool layer_is_swa(uint32_t il) const { return swa_window > 0 && il % swa_period != swa_period - 1; }
  uint32_t q_dim() const { return n_head * head_dim; }
  uint32_t kv_dim() const { return n_head_kv * head_dim; }
};

// Reads and checks the configuration. Throws std::runtime_error naming the key and the fix for a
// missing or inconsistent value, and naming the supported architectures for any other one.
ModelConfig read_config(const gguf::GgufFile& f);

// "llama (dense and Mixtral-style MoE), qwen2, gemma3, qwen3, qwen3moe, gpt-oss"
const char* supported_architectures();

}  // namespace gpunvme::llm
