#include "examples/llm/tools/model_shapes.h"

#include <stdexcept>

#include "runtime/gguf/ggml_types.h"

namespace gpunvme::llm::gen {
namespace {

namespace b = gguf::builder;

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = {
      {"llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 0, 0, 500000.0f},
      {"mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768, 8, 2, 1000000.0f},
      // Qwen3-30B-A3B and Qwen3-235B-A22B: config.json's hidden_size, num_hidden_layers, num_attention_heads,
      // num_key_value_heads, head_dim, moe_intermediate_size, vocab_size, max_position_embeddings,
      // num_experts, num_experts_per_tok, rope_theta, intermediate_size and rms_norm_eps.
      {"qwen3-30b-a3b", 48, 2048, 32, 4, 768, 151936, 40960, 128, 8, 1000000.0f, Arch::kQwen3Moe, 128, 6144, 1e-6f},
      {"qwen3-235b-a22b", 94, 4096, 64, 4, 1536, 151936, 40960, 128, 8, 1000000.0f, Arch::kQwen3Moe, 128, 12288, 1e-6f},
      {"qwen3-30b-a3b-llama", 48, 2048, 32, 4, 768, 151936, 32768, 128, 8, 1000000.0f},
      {"tiny", 2, 256, 4, 2, 512, 512, 512, 0, 0, 10000.0f},
      {"tiny-moe", 2, 256, 4, 2, 512, 512, 512, 8, 2, 10000.0f},
      {"tiny-qwen3moe", 2, 256, 4, 2, 256, 512, 512, 8, 2, 1000000.0f, Arch::kQwen3Moe, 128, 1024, 1e-6f},
      // gpt-oss-20b, gpt-oss-120b: once the engine has the MXFP4 type (issue 33), with an Arch of their own.
  };
  return all;
}

std::function<void(b::Bytes&)> kv_f32(std::string k, float v) {
  return b::kv_raw(std::move(k), [v](b::Bytes& out) { out.put<uint32_t>(b::F32).put<float>(v); });
}

uint64_t tensor_bytes(const std::vector<uint64_t>& ne, uint32_t type) {
  const auto info = gguf::ggml_type_info(type);
  if (!info) throw std::invalid_argument("unknown ggml type " + std::to_string(type));
  if (ne[0] % info->block_size)
    throw std::invalid_argument("rows of " + std::to_string(ne[0]) + " elements are not whole " + std::string(info->name) + " blocks");
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  return n / info->block_size * info->type_size;
}

}  // namespace

Shape shape_named(const std::string& name) {
  for (const Shape& s : shapes())
    if (s.name == name) return s;
  throw std::invalid_argument("unknown shape '" + name + "'; known: " + shape_names());
}

uint32_t type_named(const std::string& t) {
  if (t == "q4_k" || t == "Q4_K") return uint32_t(gguf::GgmlType::Q4_K);
  if (t == "q6_k" || t == "Q6_K") return uint32_t(gguf::GgmlType::Q6_K);
  throw std::invalid_argument("type must be q4_k or q6_k, not '" + t + "'");
}

std::string model_name(const Shape& s, uint32_t type) {
  return s.name + "-" + (type == uint32_t(gguf::GgmlType::Q4_K) ? "q4_k" : "q6_k");
}

std::string shape_names() {
  std::string out;
  for (const Shape& s : shapes()) out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

namespace {

// The metadata of `s` under its architecture's keys (llama: in the order the llama shapes were always
// written, so that their bytes stay what they were).
std::vector<std::function<void(b::Bytes&)>> metadata(const Shape& s, const std::string& name) {
  const bool qwen3moe = s.arch == Arch::kQwen3Moe;
  const std::string arch = qwen3moe ? "qwen3moe" : "llama", a = arch + ".";
  std::vector<std::function<void(b::Bytes&)>> kvs = {
      b::kv_str("general.architecture", arch), b::kv_str("general.name", name),
      b::kv_u32(a + "context_length", s.ctx), b::kv_u32(a + "embedding_length", s.hidden),
      b::kv_u32(a + "block_count", s.layers), b::kv_u32(a + "feed_forward_length", qwen3moe ? s.dense_ffn : s.ffn),
      b::kv_u32(a + "attention.head_count", s.heads), b::kv_u32(a + "attention.head_count_kv", s.kv_heads)};
  auto add = [&](std::function<void(b::Bytes&)> kv) { kvs.push_back(std::move(kv)); };
  if (qwen3moe) {  // as llama.cpp's converter writes a Qwen3-MoE: the head size given, no rope dimensions
    add(b::kv_u32(a + "attention.key_length", s.head_size()));
    add(b::kv_u32(a + "attention.value_length", s.head_size()));
  } else {
    add(b::kv_u32(a + "rope.dimension_count", s.head_size()));
  }
  add(kv_f32(a + "rope.freq_base", s.rope_base));
  add(kv_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps));
  if (!qwen3moe) add(b::kv_u32(a + "vocab_size", s.vocab));
  // No vocabulary: prompts are token ids (--prompt-ids), as for the tests' generated models.
  add(b::kv_str("tokenizer.ggml.model", "none"));
  if (s.experts) {
    add(b::kv_u32(a + "expert_count", s.experts));
    add(b::kv_u32(a + "expert_used_count", s.experts_used));
  }
  if (qwen3moe) add(b::kv_u32(a + "expert_feed_forward_length", s.ffn));
  return kvs;
}

}  // namespace

ModelLayout model_layout(const Shape& s, uint32_t type, const std::string& name) {
  ModelLayout m;
  m.spec.data = false;
  m.spec.kvs = metadata(s, name);
  const bool qwen3moe = s.arch == Arch::kQwen3Moe;
  if (qwen3moe && !s.experts) throw std::invalid_argument("shape " + s.name + ": a qwen3moe model needs experts");
  const uint64_t head = s.head_size(), q = uint64_t(s.heads) * head, kv = uint64_t(s.kv_heads) * head;
  auto add = [&](std::string n, std::vector<uint64_t> ne, uint32_t t, Fill f) {
    const uint64_t bytes = tensor_bytes(ne, t);
    m.spec.tensors.emplace_back(n, ne, t, bytes);
    m.tensors.push_back({std::move(n), std::move(ne), t, f, bytes});
  };
  const uint32_t f32 = uint32_t(gguf::GgmlType::F32);
  add("token_embd.weight", {s.hidden, s.vocab}, type, Fill::kEmbedding);
  for (uint32_t i = 0; i < s.layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", {s.hidden}, f32, Fill::kNorm);
    add(p + "attn_q.weight", {s.hidden, q}, type, Fill::kWeight);
    add(p + "attn_k.weight", {s.hidden, kv}, type, Fill::kWeight);
    add(p + "attn_v.weight", {s.hidden, kv}, type, Fill::kWeight);
    add(p + "attn_output.weight", {q, s.hidden}, type, Fill::kWeight);
    if (qwen3moe) {  // one weight per position in a head, shared by the heads (llama.cpp: {n_embd_head_k})
      add(p + "attn_q_norm.weight", {head}, f32, Fill::kNorm);
      add(p + "attn_k_norm.weight", {head}, f32, Fill::kNorm);
    }
    add(p + "ffn_norm.weight", {s.hidden}, f32, Fill::kNorm);
    if (s.experts) {  // the dense part (router) first, so the streamed part of a layer is one range
      add(p + "ffn_gate_inp.weight", {s.hidden, s.experts}, f32, Fill::kRouter);
      add(p + "ffn_gate_exps.weight", {s.hidden, s.ffn, s.experts}, type, Fill::kWeight);
      add(p + "ffn_up_exps.weight", {s.hidden, s.ffn, s.experts}, type, Fill::kWeight);
      add(p + "ffn_down_exps.weight", {s.ffn, s.hidden, s.experts}, type, Fill::kWeight);
    } else {
      add(p + "ffn_gate.weight", {s.hidden, s.ffn}, type, Fill::kWeight);
      add(p + "ffn_up.weight", {s.hidden, s.ffn}, type, Fill::kWeight);
      add(p + "ffn_down.weight", {s.ffn, s.hidden}, type, Fill::kWeight);
    }
  }
  add("output_norm.weight", {s.hidden}, f32, Fill::kNorm);
  add("output.weight", {s.hidden, s.vocab}, type, Fill::kWeight);
  return m;
}

}  // namespace gpunvme::llm::gen
