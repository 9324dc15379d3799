#include "examples/llm/model/config.h"

#include <cmath>
#include <stdexcept>

#include "host/text/escape.h"

namespace gpunvme::llm {
namespace {

struct Reader {
  const gguf::Metadata& md;
  std::string prefix;

  uint32_t u32(const std::string& key) const {
    const gguf::Value* v = md.find(prefix + key);
    if (!v) throw std::runtime_error("model metadata has no " + prefix + key + " (is this a complete " + prefix.substr(0, prefix.size() - 1) + " GGUF?)");
    const uint64_t x = v->as_uint();
    if (x == 0 || x > UINT32_MAX) throw std::runtime_error(prefix + key + " = " + std::to_string(x) + " is out of range");
    return uint32_t(x);
  }
  uint32_t u32_or(const std::string& key, uint32_t dflt) const { return md.contains(prefix + key) ? u32(key) : dflt; }
  float f32_or(const std::string& key, float dflt) const {
    const gguf::Value* v = md.find(prefix + key);
    if (!v) return dflt;
    const float x = v->as<float>();
    if (!std::isfinite(x) || x <= 0) throw std::runtime_error(prefix + key + " must be a positive number");
    return x;
  }
};

Arch arch_of(const std::string& name) {
  if (name == "llama") return Arch::kLlama;
  if (name == "qwen2") return Arch::kQwen2;
  if (name == "gemma3") return Arch::kGemma3;
  if (name == "qwen3") return Arch::kQwen3;
  if (name == "qwen3moe") return Arch::kQwen3Moe;
  throw std::runtime_error("architecture '" + text::printable(name) + "' is not supported; the engine runs " +
                           supported_architectures());
}

// llama.cpp's qwen3moe (src/models/qwen3moe.cpp): every layer routed (expert_count and expert_used_count
// required), softmax over all the router's logits, the top expert_used_count weights renormalised to sum 1
// (build_moe_ffn with norm_w; no weight scale: it does not read expert_weights_scale), the experts
// expert_feed_forward_length wide, or feed_forward_length / expert_used_count where the key is absent.
void qwen3moe_experts(ModelConfig& c, const Reader& r) {
  c.n_expert = r.u32("expert_count");
  c.n_expert_used = r.u32("expert_used_count");
  const std::string key = r.prefix + "expert_feed_forward_length";
  if (r.md.contains(key)) {
    c.n_ff = r.u32("expert_feed_forward_length");
    c.n_ff_from = key + " = " + std::to_string(c.n_ff);
  } else {
    c.n_ff_from = "no " + key + ", so " + r.prefix + "feed_forward_length / expert_used_count = " +
                  std::to_string(c.n_ff) + " / " + std::to_string(c.n_expert_used) + ", as llama.cpp takes it";
    c.n_ff /= c.n_expert_used;
  }
}

void apply_arch_rules(ModelConfig& c, const Reader& r) {
  switch (c.arch) {
    case Arch::kLlama:
      c.rope = RopeLayout::kNorm;
      break;
    case Arch::kQwen2:
      c.rope = RopeLayout::kNeox;
      break;
    case Arch::kGemma3:
      // llama.cpp's gemma3: NEOX RoPE, local layers at base 10000 with a window, every 6th layer global,
      // embeddings scaled by sqrt(n_embd), GeGLU, QK norms and post-norms.
      c.rope = RopeLayout::kNeox;
      c.rope_base_swa = 10000.0f;
      c.swa_window = r.u32("attention.sliding_window");
      c.swa_period = 6;
      c.embd_scale = std::sqrt(float(c.n_embd));
      c.act = FfnAct::kGelu;
      c.qk_norm = c.post_norms = true;
      break;
    case Arch::kQwen3:
      // llama.cpp's qwen3 (src/models/qwen3.cpp): NEOX RoPE, Q and K RMS-normed per head before it, no
      // experts (its graph has none, whatever expert_count says).
      c.rope = RopeLayout::kNeox;
      c.qk_norm = true;
      c.n_expert = c.n_expert_used = 0;
      break;
    case Arch::kQwen3Moe:
      c.rope = RopeLayout::kNeox;
      c.qk_norm = true;
      qwen3moe_experts(c, r);
      break;
  }
}

// llama.cpp's rules for n_rot: even and at most the head size (ggml's rope asserts both), the whole head
// for llama (llama-model.cpp load_hparams: "invalid n_rot") and qwen2 (its graph asserts n_rot equal
// to the head size). gemma3's graph takes any such n_rot: below the head size (partial rotary) the rest
// of each head passes unrotated (compute/ops.h).
void check_rope_dims(const ModelConfig& c, const std::string& key) {
  const std::string is = key + " = " + std::to_string(c.n_rot);
  const std::string head = "the head size " + std::to_string(c.head_dim);
  if (c.n_rot % 2) throw std::runtime_error(is + " is odd: RoPE rotates pairs of dimensions (llama.cpp refuses it too)");
  if (c.n_rot > c.head_dim) throw std::runtime_error(is + " is more than " + head + ": RoPE rotates dimensions of a head");
  if (c.arch != Arch::kGemma3 && c.n_rot != c.head_dim)
    throw std::runtime_error(is + " differs from " + head + ": a " + c.arch_name +
                             " model rotates whole heads (llama.cpp refuses it too)");
}

}  // namespace

const char* supported_architectures() { return "llama (dense and Mixtral-style MoE), qwen2, gemma3, qwen3, qwen3moe"; }

ModelConfig read_config(const gguf::GgufFile& f) {
  ModelConfig c;
  c.arch_name = f.architecture();
  if (c.arch_name.empty()) throw std::runtime_error("model metadata has no general.architecture");
  c.arch = arch_of(c.arch_name);
  const Reader r{f.metadata(), c.arch_name + "."};
  c.n_embd = r.u32("embedding_length");
  c.n_layer = r.u32("block_count");
  c.n_head = r.u32("attention.head_count");
  c.n_head_kv = r.u32_or("attention.head_count_kv", c.n_head);
  c.head_dim = r.u32_or("attention.key_length", c.n_embd / c.n_head);
  c.n_ff = r.u32("feed_forward_length");
  c.n_ff_from = r.prefix + "feed_forward_length = " + std::to_string(c.n_ff);
  c.n_ctx_train = r.u32("context_length");
  c.rms_eps = r.f32_or("attention.layer_norm_rms_epsilon", 1e-5f);
  c.rope_base = r.f32_or("rope.freq_base", 10000.0f);
  c.n_expert = f.metadata().contains(c.arch_name + ".expert_count") ? r.u32("expert_count") : 0;
  if (c.n_expert) c.n_expert_used = r.u32("expert_used_count");
  apply_arch_rules(c, r);
  c.attn_scale = 1.0f / std::sqrt(float(c.head_dim));

  if (c.n_head % c.n_head_kv) throw std::runtime_error("attention.head_count is not a multiple of head_count_kv");
  if (r.u32_or("attention.value_length", c.head_dim) != c.head_dim)
    throw std::runtime_error("attention.value_length differs from key_length: not supported");
  if (c.head_dim % 2) throw std::runtime_error("head size " + std::to_string(c.head_dim) + " is odd: RoPE needs pairs");
  c.n_rot = r.u32_or("rope.dimension_count", c.head_dim);
  check_rope_dims(c, r.prefix + "rope.dimension_count");
  if (c.n_expert && (c.n_expert_used > c.n_expert || c.n_expert > 256))
    throw std::runtime_error("expert_used_count / expert_count out of range");
  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) throw std::runtime_error("the model has no token_embd.weight tensor");
  c.n_vocab = uint32_t(emb->ne[1]);
  return c;
}

}  // namespace gpunvme::llm
