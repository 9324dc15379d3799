#include "examples/llm/model/config.h"

#include <cmath>
#include <stdexcept>

#include "examples/llm/arch/arch.h"
#include "host/text/escape.h"

namespace gpunvme::llm {
namespace {

// llama.cpp's rules for n_rot: even and at most the head size (ggml's rope asserts both), the whole head
// unless the architecture's graph takes partial rotary (arch/: gemma3), where the rest of each head
// passes unrotated (compute/ops.h); llama's loader says "invalid n_rot", qwen2's graph asserts it.
void check_rope_dims(const ModelConfig& c, const ArchRules& rules, const std::string& key) {
  const std::string is = key + " = " + std::to_string(c.n_rot);
  const std::string head = "the head size " + std::to_string(c.head_dim);
  if (c.n_rot % 2) throw std::runtime_error(is + " is odd: RoPE rotates pairs of dimensions (llama.cpp refuses it too)");
  if (c.n_rot > c.head_dim) throw std::runtime_error(is + " is more than " + head + ": RoPE rotates dimensions of a head");
  if (!rules.partial_rotary && c.n_rot != c.head_dim)
    throw std::runtime_error(is + " differs from " + head + ": a " + c.arch_name +
                             " model rotates whole heads (llama.cpp refuses it too)");
}

}  // namespace

const char* supported_architectures() {
  static const std::string names = [] {
    std::string s;
    for (const ArchRules* a : all_architectures()) s += (s.empty() ? "" : ", ") + std::string(a->summary);
    return s;
  }();
  return names.c_str();
}

ModelConfig read_config(const gguf::GgufFile& f) {
  ModelConfig c;
  c.arch_name = f.architecture();
  if (c.arch_name.empty()) throw std::runtime_error("model metadata has no general.architecture");
  const ArchRules* rules = find_architecture(c.arch_name);
  if (!rules)
    throw std::runtime_error("architecture '" + text::printable(c.arch_name) + "' is not supported; the engine runs " +
                             supported_architectures());
  c.arch = rules->arch;
  const KeyReader r{f.metadata(), c.arch_name + "."};
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
  rules->apply(c, r);
  c.attn_scale = 1.0f / std::sqrt(float(c.head_dim));

  if (c.n_head % c.n_head_kv) throw std::runtime_error("attention.head_count is not a multiple of head_count_kv");
  if (r.u32_or("attention.value_length", c.head_dim) != c.head_dim)
    throw std::runtime_error("attention.value_length differs from key_length: not supported");
  if (c.head_dim % 2) throw std::runtime_error("head size " + std::to_string(c.head_dim) + " is odd: RoPE needs pairs");
  c.n_rot = r.u32_or("rope.dimension_count", c.head_dim);
  check_rope_dims(c, *rules, r.prefix + "rope.dimension_count");
  if (c.n_expert && (c.n_expert_used > c.n_expert || c.n_expert > 256))
    throw std::runtime_error("expert_used_count / expert_count out of range");
  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) throw std::runtime_error("the model has no token_embd.weight tensor");
  c.n_vocab = uint32_t(emb->ne[1]);
  return c;
}

}  // namespace gpunvme::llm
