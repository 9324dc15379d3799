// The forward pass on the CPU, over weights in host memory: the engine's reference executor. It runs
// the same per-row arithmetic (ops.h) as the GPU kernels, so CI checks the model code token for token
// against llama.cpp without a GPU; the GPU executor is then held equal to it on the H100.
//
// A pass takes a batch of consecutive tokens (one token is a batch of one): every weight group is
// dequantized once for all of them (batched_ops.h), attention is causal inside the batch, and the KV
// cache is filled for every position. Each token's numbers are computed in the order a pass of that
// token alone computes them, so the logits of a batch are bitwise those of the same tokens one by one
// (tests/llm/test_batched.cpp).
//
// It is the block's CPU backend (block.h): the block decides what runs, this file how, on the CPU.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "examples/llm/compute/block.h"
#include "examples/llm/model/weights.h"

namespace gpunvme::llm {

class CpuForward final : public Backend {
 public:
  // `file` holds the GGUF bytes (at least up to the last tensor), and must outlive this object.
  CpuForward(const ModelConfig& c, const ModelWeights& w, std::span<const uint8_t> file, uint32_t n_ctx);

  // Runs token `token` at position `pos` and returns the logits (n_vocab floats). Positions need not
  // continue the last pass: a pass at `pos` overwrites the cache from `pos` on and attends to
  // positions < pos as they were last written (which is how a speculative pass is rolled back).
  // Throws std::runtime_error for a token id outside the vocabulary or a position past n_ctx.
  const std::vector<float>& eval(uint32_t token, uint32_t pos);

  // Runs tokens[i] at position pos0 + i, for all i, in one pass over the layers. Returns the logits of
  // every token (n x n_vocab, row i for tokens[i]) when `all_logits`, else of the last one only
  // (n_vocab floats: the output head, the largest matrix of a small model, runs once).
  std::span<const float> eval_batch(std::span<const uint32_t> tokens, uint32_t pos0, bool all_logits);

  // Backend (block.h), on this object's activations.
  void norm(Act in, const TensorRef& w, Act out) override;
  void matmul(const TensorRef& w, const TensorRef& bias, Act in, Act out) override;
  void head_norm_rope(Act qk, const TensorRef& norm, const RopeParams& rope) override;
  void store_kv(uint32_t layer) override;
  void attend(const AttnParams& p) override;
  void glu(Act gate, Act up, FfnAct act) override;
  void moe(const LayerWeights& l, Act in, Act out) override;
  void add(Act x, Act y) override;
  // Throws std::runtime_error for n == 0 or a position past n_ctx.
  void set_pass(uint32_t pos0, uint32_t n) override;
  void write(Act a, std::span<const float> v) override;
  std::vector<float> read(Act a) override;

 private:
  const uint8_t* at(const TensorRef& t) const { return file_.data() + t.file_offset; }
  float* buf(Act a);
  // Y[n x rows] = X[n x cols] W^T for matrix `mat` of t (an expert of a stacked tensor, else 0).
  void matmul_rows(const TensorRef& t, uint64_t mat, const float* x, uint32_t n, float* y);
  void rms_norm(const float* x, const TensorRef& w, uint32_t n, float* out) const;
  void rms_norm_rows(float* x, const TensorRef& w, uint32_t dim, uint32_t n, float* out) const;
  void attend_token(const float* q, uint32_t layer, uint32_t pos, uint32_t window, const float* sinks, float* out);
  // y[r] += bias row `mat` of t (F32, t.cols per row) for each of n rows of y (nothing without t).
  void add_bias(const TensorRef& t, uint64_t mat, uint32_t n, float* y) const;
  void reserve(uint32_t n);

  ModelConfig c_;
  ModelWeights w_;
  std::span<const uint8_t> file_;
  uint32_t n_ctx_;
  uint32_t pos0_ = 0, n_ = 1;  // the pass: tokens at pos0_ .. pos0_ + n_ - 1
  uint32_t capacity_ = 0;  // tokens the per-token buffers below hold
  std::vector<float> k_cache_, v_cache_;  // [layer][pos][kv_dim], values rounded to f16 as llama.cpp stores them
  // Per token of the pass, row-major [token][dim]:
  std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_, gather_;
  std::vector<float> moe_out_;  // [token][k][n_embd]: each token's experts' outputs
  std::vector<float> scores_, part_, logits_;
};

}  // namespace gpunvme::llm
