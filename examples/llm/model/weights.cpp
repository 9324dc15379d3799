#include "examples/llm/model/weights.h"

#include <algorithm>
#include <stdexcept>

namespace gpunvme::llm {
namespace {

std::string shape_text(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (uint32_t i = 0; i < t.n_dims; ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
  return s + "]";
}

// The tensor `name`, which must have shape {cols, rows, mats} (trailing 1s may be omitted); a shape error
// names `from`, the settings the shape came from, where given.
TensorRef want(const gguf::GgufFile& f, const std::string& name, uint64_t cols, uint64_t rows = 1, uint64_t mats = 1,
               bool optional = false, const std::string& from = {}) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) {
    if (optional) return {};
    throw std::runtime_error("the model has no tensor " + name + " (needed by this architecture)");
  }
  if (!computes(t->type.type))
    throw std::runtime_error("tensor " + name + " is of type " + std::string(t->type.name) +
                             ", which the engine does not compute (" + computed_type_names() + ")");
  if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != mats || t->ne[3] != 1)
    throw std::runtime_error("tensor " + name + " has shape " + shape_text(*t) + ", the model's settings imply [" +
                             std::to_string(cols) + ", " + std::to_string(rows) + (mats > 1 ? ", " + std::to_string(mats) : "") + "]" +
                             (from.empty() ? "" : " (" + from + ")"));
  // Matrices are dequantized 32 elements at a time; an F32 vector (norms, biases, sinks) is read as floats.
  const bool f32_vector = t->type.type == GgmlType::F32 && rows == 1 && mats == 1;
  if (cols % 32 && !f32_vector)
    throw std::runtime_error("tensor " + name + ": rows of " + std::to_string(cols) + " elements are not a multiple of 32");
  return {t->type.type, cols, rows, mats, t->file_offset, t->size_bytes, true};
}

// A bias or sink vector: as want, and F32 (the forward passes add them as floats, as llama.cpp's graph
// adds its F32 tensors).
TensorRef want_f32(const gguf::GgufFile& f, const std::string& name, uint64_t cols, uint64_t rows = 1) {
  TensorRef t = want(f, name, cols, rows);
  if (t.type != GgmlType::F32)
    throw std::runtime_error("tensor " + name + " is of type " + std::string(f.find_tensor(name)->type.name) +
                             ", the engine adds it as F32 (as gpt-oss GGUFs store it)");
  return t;
}

void extend(LayerWeights& l, const TensorRef& t) {
  if (!t.present) return;
  l.begin = std::min(l.begin, t.file_offset);
  l.end = std::max(l.end, t.file_offset + t.bytes);
}

LayerWeights map_layer(const gguf::GgufFile& f, const ModelConfig& c, uint32_t il) {
  const std::string p = "blk." + std::to_string(il) + ".";
  const bool bias = c.arch == Arch::kQwen2 || c.biases;
  LayerWeights l;
  l.index = il;
  l.attn_norm = want(f, p + "attn_norm.weight", c.n_embd);
  l.wq = want(f, p + "attn_q.weight", c.n_embd, c.q_dim());
  l.wk = want(f, p + "attn_k.weight", c.n_embd, c.kv_dim());
  l.wv = want(f, p + "attn_v.weight", c.n_embd, c.kv_dim());
  l.wo = want(f, p + "attn_output.weight", c.q_dim(), c.n_embd);
  l.bq = want(f, p + "attn_q.bias", c.q_dim(), 1, 1, !bias);
  l.bk = want(f, p + "attn_k.bias", c.kv_dim(), 1, 1, !bias);
  l.bv = want(f, p + "attn_v.bias", c.kv_dim(), 1, 1, !bias);
  // Optional biases (as llama.cpp loads them for every architecture) come as a set: the forward pass adds
  // all three where attn_q.bias is present.
  if (l.bq.present != l.bk.present || l.bq.present != l.bv.present)
    throw std::runtime_error("layer " + std::to_string(il) + " has some of attn_q.bias, attn_k.bias, attn_v.bias but " +
                             "not all three: the engine adds them together");
  if (c.biases) l.bo = want(f, p + "attn_output.bias", c.n_embd);
  if (c.sinks) l.sinks = want(f, p + "attn_sinks.weight", c.n_head);
  if (c.qk_norm) {
    l.q_norm = want(f, p + "attn_q_norm.weight", c.head_dim);
    l.k_norm = want(f, p + "attn_k_norm.weight", c.head_dim);
  }
  if (c.post_norms) {
    l.post_attn_norm = want(f, p + "post_attention_norm.weight", c.n_embd);
    l.post_ffw_norm = want(f, p + "post_ffw_norm.weight", c.n_embd);
  }
  l.ffn_norm = want(f, p + c.ffn_norm + ".weight", c.n_embd);
  const std::string& ff = c.n_ff_from;
  if (c.is_moe()) {
    l.gate_inp = want(f, p + "ffn_gate_inp.weight", c.n_embd, c.n_expert);
    l.gate_exps = want(f, p + "ffn_gate_exps.weight", c.n_embd, c.n_ff, c.n_expert, false, ff);
    l.up_exps = want(f, p + "ffn_up_exps.weight", c.n_embd, c.n_ff, c.n_expert, false, ff);
    l.down_exps = want(f, p + "ffn_down_exps.weight", c.n_ff, c.n_embd, c.n_expert, false, ff);
    if (c.biases) {
      l.gate_inp_b = want_f32(f, p + "ffn_gate_inp.bias", c.n_expert);
      l.gate_exps_b = want_f32(f, p + "ffn_gate_exps.bias", c.n_ff, c.n_expert);
      l.up_exps_b = want_f32(f, p + "ffn_up_exps.bias", c.n_ff, c.n_expert);
      l.down_exps_b = want_f32(f, p + "ffn_down_exps.bias", c.n_embd, c.n_expert);
      // one bias row per expert: a fetched expert takes its row as it takes its matrices (mats)
      for (TensorRef* b : {&l.gate_exps_b, &l.up_exps_b, &l.down_exps_b}) b->mats = b->rows, b->rows = 1;
    }
  } else {
    l.gate = want(f, p + "ffn_gate.weight", c.n_embd, c.n_ff, 1, false, ff);
    l.up = want(f, p + "ffn_up.weight", c.n_embd, c.n_ff, 1, false, ff);
    l.down = want(f, p + "ffn_down.weight", c.n_ff, c.n_embd, 1, false, ff);
  }
  l.begin = UINT64_MAX;
  for (const TensorRef* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.bo, &l.sinks, &l.q_norm,
                             &l.k_norm, &l.post_attn_norm, &l.ffn_norm, &l.gate, &l.up, &l.down, &l.post_ffw_norm,
                             &l.gate_inp, &l.gate_exps, &l.up_exps, &l.down_exps, &l.gate_inp_b, &l.gate_exps_b,
                             &l.up_exps_b, &l.down_exps_b})
    extend(l, *t);
  return l;
}

}  // namespace

ModelWeights map_weights(const gguf::GgufFile& f, const ModelConfig& c) {
  ModelWeights w;
  w.token_embd = want(f, "token_embd.weight", c.n_embd, c.n_vocab);
  w.output_norm = want(f, "output_norm.weight", c.n_embd);
  w.output = want(f, "output.weight", c.n_embd, c.n_vocab, 1, /*optional=*/true);
  if (!w.output.present) w.output = w.token_embd;  // tied embeddings (gemma3, some llama)
  for (uint32_t il = 0; il < c.n_layer; ++il) w.layers.push_back(map_layer(f, c, il));
  return w;
}

}  // namespace gpunvme::llm
