// The forward pass on the CPU, over weights in host memory: the engine's reference executor. It runs
// the same per-row arithmetic (ops.h) as the GPU kernels, so CI checks the model code token for token
// against llama.cpp without a GPU; the GPU executor is then held equal to it on the H100.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "examples/llm/model/weights.h"

namespace gpunvme::llm {

class CpuForward {
 public:
  // `file` holds the GGUF bytes (at least up to the last tensor), and must outlive this object.
  CpuForward(const ModelConfig& c, const ModelWeights& w, std::span<const uint8_t> file, uint32_t n_ctx);

  // Runs token `token` at position `pos` (positions 0, 1, 2, ... in order) and returns the logits.
  // Throws std::runtime_error for a token id outside the vocabulary or a position past n_ctx.
  const std::vector<float>& eval(uint32_t token, uint32_t pos);

 private:
  const uint8_t* at(const TensorRef& t) const { return file_.data() + t.file_offset; }
  void matvec(const TensorRef& t, uint64_t mat, const float* x, float* y) const;
  void rms_norm(const float* x, const TensorRef& w, uint32_t n, float* out) const;
  void attention(const LayerWeights& l, uint32_t pos);
  void ffn(const LayerWeights& l);
  void moe(const LayerWeights& l);

  ModelConfig c_;
  ModelWeights w_;
  std::span<const uint8_t> file_;
  uint32_t n_ctx_;
  std::vector<float> k_cache_, v_cache_;  // [layer][pos][kv_dim], values rounded to f16 as llama.cpp stores them
  std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_, scores_, logits_, moe_out_;
};

}  // namespace gpunvme::llm
