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
      // gpt-oss-20b and gpt-oss-120b: config.json's num_hidden_layers, hidden_size, num_attention_heads,
      // num_key_value_heads, intermediate_size (the experts' width, which the converter also writes as
      // feed_forward_length), vocab_size, max_position_embeddings, num_local_experts,
      // num_experts_per_tok (experts_per_token), rope_theta, head_dim, rms_norm_eps, sliding_window and
      // rope_scaling (YaRN, factor 32 from 4096).
      {"gpt-oss-20b", 24, 2880, 64, 8, 2880, 201088, 131072, 32, 4, 150000.0f, Arch::kGptOss, 64, 2880, 1e-5f, 128, 32.0f, 4096},
      {"gpt-oss-120b", 36, 2880, 64, 8, 2880, 201088, 131072, 128, 4, 150000.0f, Arch::kGptOss, 64, 2880, 1e-5f, 128, 32.0f, 4096},
      {"tiny-gpt-oss", 2, 320, 8, 2, 320, 512, 512, 8, 4, 150000.0f, Arch::kGptOss, 64, 320, 1e-5f, 8, 32.0f, 4096},
      // Llama 3 8B: config.json's num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads,
      // intermediate_size, vocab_size, max_position_embeddings, rope_theta and rms_norm_eps.
      {"llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 0, 0, 500000.0f},
      // Gemma 3 270M: the published GGUF's gemma3.* keys (block_count, embedding_length, head_count(_kv),
      // key_length, feed_forward_length, context_length, rope.freq_base, layer_norm_rms_epsilon,
      // sliding_window) and its token_embd's 262144 rows. It has no window pattern key: llama.cpp's
      // gemma3 loader takes every 6th layer global.
      {"gemma3-270m", 18, 640, 4, 1, 2048, 262144, 32768, 0, 0, 1000000.0f, Arch::kGemma3, 256, 0, 1e-6f, 512},
      {"tiny-gemma3", 6, 320, 4, 1, 512, 512, 512, 0, 0, 1000000.0f, Arch::kGemma3, 64, 0, 1e-6f, 8},
  };
  return all;
}

// The --type names: each a ggml type id (mxfp4's other matrices are Q8_0: matrix_types).
struct WeightType {
  const char* name;
  const char* upper;
  gguf::GgmlType type;
};
constexpr WeightType kWeightTypes[] = {{"q4_k", "Q4_K", gguf::GgmlType::Q4_K},
                                       {"q6_k", "Q6_K", gguf::GgmlType::Q6_K},
                                       {"q8_0", "Q8_0", gguf::GgmlType::Q8_0},
                                       {"mxfp4", "MXFP4", gguf::GgmlType::MXFP4}};

std::function<void(b::Bytes&)> kv_f32(std::string k, float v) {
  return b::kv_raw(std::move(k), [v](b::Bytes& out) { out.put<uint32_t>(b::F32).put<float>(v); });
}

// The type a matrix with rows of `cols` elements is written in: `type`, or where the rows are not whole
// blocks of it, the type llama.cpp's quantizer falls back to (llama-quant.cpp, tensor_type_fallback).
uint32_t row_type(uint64_t cols, uint32_t type) {
  const auto info = gguf::ggml_type_info(type);
  if (!info || cols % info->block_size == 0) return type;
  if (type == uint32_t(gguf::GgmlType::Q4_K)) return uint32_t(gguf::GgmlType::Q5_0);
  if (type == uint32_t(gguf::GgmlType::Q6_K)) return uint32_t(gguf::GgmlType::Q8_0);
  return type;  // tensor_bytes refuses it, naming the block size
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
  for (const WeightType& w : kWeightTypes)
    if (t == w.name || t == w.upper) return uint32_t(w.type);
  throw std::invalid_argument("type must be q4_k, q6_k, q8_0 or mxfp4, not '" + t + "'");
}

std::string model_name(const Shape& s, uint32_t type) {
  for (const WeightType& w : kWeightTypes)
    if (type == uint32_t(w.type)) return s.name + "-" + w.name;
  throw std::invalid_argument("no weight type has ggml type id " + std::to_string(type));
}

MatrixTypes matrix_types(uint32_t type) {
  if (type == uint32_t(gguf::GgmlType::MXFP4)) return {type, uint32_t(gguf::GgmlType::Q8_0)};
  return {type, type};
}

std::string shape_names() {
  std::string out;
  for (const Shape& s : shapes()) out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

namespace {

const char* arch_key(Arch a) {
  switch (a) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen3Moe: return "qwen3moe";
    case Arch::kGptOss: return "gpt-oss";
    case Arch::kGemma3: return "gemma3";
  }
  throw std::logic_error("unknown architecture");
}

// The metadata of `s` under its architecture's keys (llama: in the order its shapes were always written,
// so that their bytes stay what they were).
std::vector<std::function<void(b::Bytes&)>> metadata(const Shape& s, const std::string& name,
                                                     const std::vector<std::function<void(b::Bytes&)>>& vocab) {
  const bool llama = s.arch == Arch::kLlama, gpt_oss = s.arch == Arch::kGptOss, moe_arch = !llama && s.experts;
  const std::string arch = arch_key(s.arch), a = arch + ".";
  std::vector<std::function<void(b::Bytes&)>> kvs = {
      b::kv_str("general.architecture", arch), b::kv_str("general.name", name),
      b::kv_u32(a + "context_length", s.ctx), b::kv_u32(a + "embedding_length", s.hidden),
      b::kv_u32(a + "block_count", s.layers), b::kv_u32(a + "feed_forward_length", moe_arch ? s.dense_ffn : s.ffn),
      b::kv_u32(a + "attention.head_count", s.heads), b::kv_u32(a + "attention.head_count_kv", s.kv_heads)};
  auto add = [&](std::function<void(b::Bytes&)> kv) { kvs.push_back(std::move(kv)); };
  if (!llama) {  // as llama.cpp's converter writes these: the head size given, no rope dimensions
    add(b::kv_u32(a + "attention.key_length", s.head_size()));
    add(b::kv_u32(a + "attention.value_length", s.head_size()));
  } else {
    add(b::kv_u32(a + "rope.dimension_count", s.head_size()));
  }
  add(kv_f32(a + "rope.freq_base", s.rope_base));
  add(kv_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps));
  // Without a vocabulary (--vocab-from) prompts are token ids (--prompt-ids), as for the tests' generated
  // models. llama.cpp makes that many placeholder tokens of a file without one (llama-vocab.cpp, "none"):
  // without the key it has none and refuses token_embd's rows.
  add(b::kv_u32(a + "vocab_size", s.vocab));
  if (vocab.empty()) add(b::kv_str("tokenizer.ggml.model", "none"));
  for (const auto& kv : vocab) add(kv);
  if (s.experts) {
    add(b::kv_u32(a + "expert_count", s.experts));
    add(b::kv_u32(a + "expert_used_count", s.experts_used));
  }
  if (moe_arch) add(b::kv_u32(a + "expert_feed_forward_length", s.ffn));
  if (s.swa_window) add(b::kv_u32(a + "attention.sliding_window", s.swa_window));
  if (gpt_oss) {  // the YaRN keys gpt-oss GGUFs carry (arch/gpt_oss.cpp reads them)
    add(b::kv_str(a + "rope.scaling.type", "yarn"));
    add(kv_f32(a + "rope.scaling.factor", s.yarn_factor));
    add(b::kv_u32(a + "rope.scaling.original_context_length", s.yarn_orig_ctx));
  }
  return kvs;
}

// The shape and type go together: refused naming the fix.
void check_type(const Shape& s, uint32_t type) {
  const bool mxfp4 = type == uint32_t(gguf::GgmlType::MXFP4);
  if ((s.arch == Arch::kQwen3Moe || s.arch == Arch::kGptOss) && !s.experts)
    throw std::invalid_argument("shape " + s.name + ": a " + arch_key(s.arch) + " model needs experts");
  if (mxfp4 && !s.experts)
    throw std::invalid_argument("type mxfp4 is MXFP4 experts with Q8_0 elsewhere, and shape " + s.name +
                                " has no experts: use q4_k, q6_k or q8_0");
  if (s.arch == Arch::kGptOss && !mxfp4)
    throw std::invalid_argument("shape " + s.name + " takes type mxfp4 (MXFP4 experts, Q8_0 elsewhere: gpt-oss as published); its rows of " +
                                std::to_string(s.hidden) + " are not whole 256-element k-quant blocks");
}

}  // namespace

ModelLayout model_layout(const Shape& s, uint32_t type, const std::string& name,
                         const std::vector<std::function<void(b::Bytes&)>>& vocab) {
  check_type(s, type);
  ModelLayout m;
  m.spec.data = false;
  m.spec.kvs = metadata(s, name, vocab);
  const bool qwen3moe = s.arch == Arch::kQwen3Moe, gpt_oss = s.arch == Arch::kGptOss, gemma3 = s.arch == Arch::kGemma3;
  const uint64_t head = s.head_size(), q = uint64_t(s.heads) * head, kv = uint64_t(s.kv_heads) * head;
  auto add = [&](std::string n, std::vector<uint64_t> ne, uint32_t t, Fill f) {
    t = row_type(ne[0], t);
    const uint64_t bytes = tensor_bytes(ne, t);
    m.spec.tensors.emplace_back(n, ne, t, bytes);
    m.tensors.push_back({std::move(n), std::move(ne), t, f, bytes});
  };
  const uint32_t f32 = uint32_t(gguf::GgmlType::F32);
  // A matrix `n`.weight, and for gpt-oss its F32 bias right after it: one value per output row (per
  // expert and row for an expert stack: ne without its first dimension).
  auto matrix = [&](const std::string& n, const std::vector<uint64_t>& ne, uint32_t t, Fill f) {
    add(n + ".weight", ne, t, f);
    if (gpt_oss) add(n + ".bias", std::vector<uint64_t>(ne.begin() + 1, ne.end()), f32, Fill::kBias);
  };
  const MatrixTypes types = matrix_types(type);
  const uint32_t mat = types.others;
  // gemma3's output is its token embedding, and its graph scales the embedding up by sqrt(hidden): with
  // values of about 1 and norms of about 1 the residual keeps the input token's row, and greedy decoding
  // repeats the last token. So, as in the published model, embeddings of about 1/sqrt(hidden) (0.04
  // there) and post_ffw_norm weights that outweigh them (8 here; there 1.8 on average, spread 6); the
  // attention's post-norm stays about 1, or its average over positions drowns the token and the tokens
  // repeat (tried: 4 for both gave 3 distinct tokens in 12 on tiny-gemma3, this 11 or 12).
  add("token_embd.weight", {s.hidden, s.vocab}, mat, gemma3 ? Fill::kWeight : Fill::kEmbedding);
  for (uint32_t i = 0; i < s.layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", {s.hidden}, f32, Fill::kNorm);
    matrix(p + "attn_q", {s.hidden, q}, mat, Fill::kWeight);
    matrix(p + "attn_k", {s.hidden, kv}, mat, Fill::kWeight);
    matrix(p + "attn_v", {s.hidden, kv}, mat, Fill::kWeight);
    matrix(p + "attn_output", {q, s.hidden}, mat, Fill::kWeight);
    if (qwen3moe || gemma3) {  // one weight per position in a head, shared by the heads (llama.cpp: {n_embd_head_k})
      add(p + "attn_q_norm.weight", {head}, f32, Fill::kNorm);
      add(p + "attn_k_norm.weight", {head}, f32, Fill::kNorm);
    }
    // gpt-oss: a sink logit per head, and its FFN's input norm is post_attention_norm (no ffn_norm);
    // gemma3: post_attention_norm on the attention's output, before the residual, and ffn_norm.
    if (gpt_oss) add(p + "attn_sinks.weight", {s.heads}, f32, Fill::kBias);
    if (gpt_oss || gemma3) add(p + "post_attention_norm.weight", {s.hidden}, f32, Fill::kNorm);
    if (!gpt_oss) add(p + "ffn_norm.weight", {s.hidden}, f32, Fill::kNorm);
    if (s.experts) {  // the dense part (router) first: without biases the streamed part of a layer is one range
      matrix(p + "ffn_gate_inp", {s.hidden, s.experts}, f32, Fill::kRouter);
      matrix(p + "ffn_gate_exps", {s.hidden, s.ffn, s.experts}, types.experts, Fill::kWeight);
      matrix(p + "ffn_up_exps", {s.hidden, s.ffn, s.experts}, types.experts, Fill::kWeight);
      matrix(p + "ffn_down_exps", {s.ffn, s.hidden, s.experts}, types.experts, Fill::kWeight);
    } else {
      matrix(p + "ffn_gate", {s.hidden, s.ffn}, mat, Fill::kWeight);
      matrix(p + "ffn_up", {s.hidden, s.ffn}, mat, Fill::kWeight);
      matrix(p + "ffn_down", {s.ffn, s.hidden}, mat, Fill::kWeight);
    }
    if (gemma3) add(p + "post_ffw_norm.weight", {s.hidden}, f32, Fill::kPostNorm);
  }
  add("output_norm.weight", {s.hidden}, f32, Fill::kNorm);
  if (!gemma3) add("output.weight", {s.hidden, s.vocab}, mat, Fill::kWeight);  // gemma3's is token_embd (tied)
  return m;
}

}  // namespace gpunvme::llm::gen
