// Where each weight of the model lives in the GGUF, checked against the configuration: every tensor
// the architecture needs is present, of a type the engine computes, of the shape the config implies.
// Offsets are the tensors' absolute file offsets; a layer's tensors sit inside that layer's extent
// (runtime/model/lba_map.h), so a streamed layer slot holds them at offset - layer_begin.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "examples/llm/model/config.h"
#include "examples/llm/quant/weight_types.h"

namespace gpunvme::llm {

struct TensorRef {
  GgmlType type = GgmlType::F32;
  uint64_t cols = 0;         // ne0: elements per row (the input size of a matrix)
  uint64_t rows = 1;         // ne1
  uint64_t mats = 1;         // ne2: experts of a stacked *_exps tensor
  uint64_t file_offset = 0;  // absolute byte offset in the GGUF
  uint64_t bytes = 0;
  bool present = false;

  uint64_t row_bytes() const { return bytes / (rows * mats); }
  uint64_t mat_bytes() const { return bytes / mats; }
};

struct LayerWeights {
  uint32_t index = 0;
  uint64_t begin = 0, end = 0;  // byte range of the layer's tensors in the file
  TensorRef attn_norm, wq, wk, wv, wo, bq, bk, bv, bo, q_norm, k_norm, post_attn_norm;
  TensorRef sinks;  // F32, one logit per head (gpt-oss)
  TensorRef ffn_norm, gate, up, down, post_ffw_norm;
  TensorRef gate_inp, gate_exps, up_exps, down_exps;  // MoE
  // MoE biases (gpt-oss), F32: the router's (n_expert), and per expert a row of its matrix's outputs
  // (mats = n_expert rows of n_ff, n_ff and n_embd).
  TensorRef gate_inp_b, gate_exps_b, up_exps_b, down_exps_b;
};

struct ModelWeights {
  TensorRef token_embd, output_norm, output;  // output may be token_embd (tied)
  std::vector<LayerWeights> layers;
  // The head is the embedding table (the GGUF has no output.weight): one copy serves both.
  bool tied() const { return output.file_offset == token_embd.file_offset; }
};

// Finds and checks every tensor. Throws std::runtime_error naming the tensor and what is wrong
// (missing, unsupported type, shape) — never a partially described model.
ModelWeights map_weights(const gguf::GgufFile& f, const ModelConfig& c);

}  // namespace gpunvme::llm
