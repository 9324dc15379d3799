// The forward pass on the CPU, over weights in host memory: the engine's reference executor. It runs
// the same per-row arithmetic (ops.h) as the GPU kernels, so CI checks the model code token for token
// against llama.cpp without a GPU; the GPU executor is then held equal to it on the H100.
//
// A pass takes a batch of tokens (one token is a batch of one) of one sequence or several, each
// sequence with a KV cache slot of its own (pass_tokens.h): every weight group is dequantized once
// for all of them (batched_ops.h), attention is causal inside the batch and reads the token's own
// sequence only, and the KV cache is filled for every token. Each token's numbers are computed in the
// order a pass of that token alone computes them, so the logits of a batch are bitwise those of the
// same tokens one by one, and a sequence's beside others' are those it has alone
// (tests/llm/test_batched.cpp, test_multi_seq.cpp).
//
// It is the block's CPU backend (block.h): the block decides what runs, this file how, on the CPU.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "examples/llm/compute/block.h"
#include "examples/llm/model/weights.h"
#include "examples/llm/quant/llamacpp_rounding.h"

namespace gpunvme::llm {

class CpuForward final : public Backend {
 public:
  // `file` holds the GGUF bytes (at least up to the last tensor), and must outlive this object. The KV
  // cache holds `n_seqs` sequences of n_ctx positions; a pass takes at most `max_batch` tokens (0: any
  // number; the buffers grow with the pass).
  CpuForward(const ModelConfig& c, const ModelWeights& w, std::span<const uint8_t> file, uint32_t n_ctx, uint32_t n_seqs = 1,
             uint32_t max_batch = 0);

  // Runs the tokens of `pass` in one pass over the layers, each in its sequence's slot at its position
  // (pass_tokens.h's rules, checked first: a refused pass changes nothing). Returns the logits of the
  // tokens flagged for them, n_vocab floats each, in the pass's order (the output head, the largest
  // matrix of a small model, runs for those only). A pass at a position before its slot's length
  // overwrites the cache from there on and attends to the positions before as last written (which is
  // how a speculative pass is rolled back). Throws std::runtime_error for a broken rule or a token id
  // outside the vocabulary.
  std::span<const float> eval_batch(std::span<const PassToken> pass);
  // Sequence 0's tokens[i] at position pos0 + i; the logits of every token (n x n_vocab, row i for
  // tokens[i]) when `all_logits`, else of the last one only.
  std::span<const float> eval_batch(std::span<const uint32_t> tokens, uint32_t pos0, bool all_logits);
  // Sequence 0's token `token` at position `pos`; its logits (n_vocab floats).
  const std::vector<float>& eval(uint32_t token, uint32_t pos);

  uint32_t n_seqs() const { return slots_.count(); }
  uint32_t seq_length(uint32_t seq) const { return slots_.length(seq); }  // positions the slot's cache holds
  // The sequence in slot `seq` is done: the slot is free, its next pass starts at position 0.
  void free_seq(uint32_t seq) { slots_.free(seq); }

  // Backend (block.h), on this object's activations.
  void norm(Act in, const TensorRef& w, Act out) override;
  void matmul(const TensorRef& w, const TensorRef& bias, Act in, Act out) override;
  void head_norm_rope(Act qk, const TensorRef& norm, const RopeParams& rope) override;
  void store_kv(uint32_t layer) override;
  void attend(const AttnParams& p) override;
  void glu(Act gate, Act up, FfnAct act) override;
  void moe(const LayerWeights& l, Act in, Act out) override;
  void add(Act x, Act y) override;
  // Throws std::runtime_error as SeqSlots::check_places says.
  void set_pass(std::span<const PassToken> tokens) override;
  using Backend::set_pass;
  void write(Act a, std::span<const float> v) override;
  std::vector<float> read(Act a) override;

 private:
  const uint8_t* at(const TensorRef& t) const { return file_.data() + t.file_offset; }
  float* buf(Act a);
  // Y[n x rows] = X[n x cols] W^T for matrix `mat` of t (an expert of a stacked tensor, else 0).
  void matmul_rows(const TensorRef& t, uint64_t mat, const float* x, uint32_t n, float* y);
  void rms_norm(const float* x, const TensorRef& w, uint32_t n, float* out) const;
  void rms_norm_rows(float* x, const TensorRef& w, uint32_t dim, uint32_t n, float* out) const;
  // Row (layer, seq, pos) of the caches: [layer][seq][pos][kv_dim], a layer's slots side by side.
  size_t kv_row(uint32_t layer, uint32_t seq, uint32_t pos) const {
    return ((size_t(layer) * slots_.count() + seq) * n_ctx_ + pos) * c_.kv_dim();
  }
  void attend_token(const float* q, uint32_t layer, const PassToken& at, uint32_t window, const float* sinks, float* out);
  // y[r] += bias row `mat` of t (F32, t.cols per row) for each of n rows of y (nothing without t).
  void add_bias(const TensorRef& t, uint64_t mat, uint32_t n, float* y) const;
  void reserve(uint32_t n);

  ModelConfig c_;
  ModelWeights w_;
  std::span<const uint8_t> file_;
  uint32_t n_ctx_;
  SeqSlots slots_;
  uint32_t max_batch_;
  std::vector<PassToken> pass_;  // the pass: where each of its tokens is
  uint32_t n_ = 0;               // pass_.size()
  uint32_t capacity_ = 0;  // tokens the per-token buffers below hold
  std::vector<float> k_cache_, v_cache_;  // kv_row()'s layout, values rounded to f16 as llama.cpp stores them
  // Per token of the pass, row-major [token][dim]:
  std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_, gather_;
  std::vector<float> moe_out_;  // [token][k][n_embd]: each token's experts' outputs
  std::vector<float> scores_, part_, logits_;
  LlamacppRounding rounding_;    // none unless GPUNVME_LLM_LLAMACPP_ROUNDING says (quant/llamacpp_rounding.h)
  std::vector<float> rounded_;  // a product's activations rounded as llama.cpp's, when it says so
};

}  // namespace gpunvme::llm
