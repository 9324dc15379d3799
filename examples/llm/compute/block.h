// The transformer block, written once (block.cpp) over the operations below, which the CPU backend
// (cpu_forward.cpp) and the GPU backend (gpu_forward.cu) each implement: as llama.cpp builds every
// model once over ggml's operations. The block makes the model's decisions (QKV biases, Q/K norms,
// the RoPE base and the window of each layer, post-norms, dense or routed FFN) from the config, so a
// backend holds arithmetic and memory only, and a decision is made in one place for both.
//
// A backend holds the activations of one pass (its n tokens, row-major [token][width]; each token of a
// sequence slot at a position, pass_tokens.h) and the KV cache, a slot per sequence; an operation reads
// and writes them by name. A token's RoPE, KV row and attention use its own position and slot only. Where weights live (a file in host
// memory, a streamed slot, fetched experts) is the backend's business: the block names tensors only.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "examples/llm/compute/ops.h"
#include "examples/llm/compute/pass_tokens.h"
#include "examples/llm/model/config.h"
#include "examples/llm/model/weights.h"

namespace gpunvme::llm {

// A pass's activations, per token: the residual stream x and the normed xn (n_embd), q and the
// attention's output att (q_dim), k and v (kv_dim), the FFN's gate and up (n_ff), and tmp (n_embd):
// a sublayer's output before the residual add.
enum class Act : uint8_t { kX, kXn, kQ, kK, kV, kAtt, kTmp, kGate, kUp };

// One layer's attention over the cache.
struct AttnParams {
  uint32_t layer = 0;
  uint32_t window = 0;  // a token sees its last `window` positions (itself included); 0: all before it
  // Attention sinks (gpt-oss: a learned F32 logit per head that joins each softmax and takes no value).
  TensorRef sinks;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // out = RMS norm of in (n_embd per token) times w; out may be in.
  virtual void norm(Act in, const TensorRef& w, Act out) = 0;
  // out = in W^T, plus bias where bias.present (F32, one per row), per token.
  virtual void matmul(const TensorRef& w, const TensorRef& bias, Act in, Act out) = 0;
  // qk is kQ or kK: each head RMS-normed by `norm` where norm.present (the per-head Q/K norm), then
  // RoPE of its first n_rot dimensions at the token's position, as `rope` says (base, YaRN scaling).
  virtual void head_norm_rope(Act qk, const TensorRef& norm, const RopeParams& rope) = 0;
  // k and v of every token of the pass into the cache of `layer`, its sequence's slot, at its position.
  virtual void store_kv(uint32_t layer) = 0;
  // att = each token's attention of q over the cached positions of its sequence it sees (causal, and p.window).
  virtual void attend(const AttnParams& p) = 0;
  // gate = glu(act, gate, up), element by element (ops.h).
  virtual void glu(Act gate, Act up, FfnAct act) = 0;
  // out = the routed experts' FFN of in (layer l's router and its bias, top-k as the config's gating says,
  // each expert's GLU with its biases, their weighted sum).
  virtual void moe(const LayerWeights& l, Act in, Act out) = 0;
  // x += y (the residual).
  virtual void add(Act x, Act y) = 0;

  // Fusions a backend may run as fewer kernels (the GPU's decode: each launch costs a few microseconds,
  // issue 36), each with the bits of the operations it stands for; by default those operations.
  // Products of one input: out = in W^T (+ bias) for each (a layer's Q, K and V).
  struct Product {
    TensorRef w, bias;
    Act out;
  };
  virtual void matmuls(std::span<const Product> ps, Act in) {
    for (const Product& p : ps) matmul(p.w, p.bias, in, p.out);
  }
  // The products of in's RMS norm times norm_w (a layer's input norm, then Q, K and V): norm into kXn,
  // then matmuls from kXn. kXn's contents after it are unspecified.
  virtual void norm_matmuls(const TensorRef& norm_w, Act in, std::span<const Product> ps) {
    norm(in, norm_w, Act::kXn);
    matmuls(ps, Act::kXn);
  }
  // kGate = glu(act, in W_gate^T, in W_up^T): matmul into kGate and kUp, then glu. kUp's contents after
  // it are unspecified (a fused kernel does not write it).
  virtual void gated_matmul(const TensorRef& gate, const TensorRef& up, Act in, FfnAct act) {
    matmul(gate, {}, in, Act::kGate);
    matmul(up, {}, in, Act::kUp);
    glu(Act::kGate, Act::kUp, act);
  }
  // x += in W^T (+ bias): matmul into kTmp, then add. kTmp's contents after it are unspecified.
  virtual void matmul_add(const TensorRef& w, const TensorRef& bias, Act in, Act x) {
    matmul(w, bias, in, Act::kTmp);
    add(x, Act::kTmp);
  }
  // kGate = glu(act, n W_gate^T, n W_up^T) for n = in's RMS norm times norm_w: norm into kXn, then
  // gated_matmul from kXn. kXn's and kUp's contents after it are unspecified.
  virtual void norm_gated_matmul(const TensorRef& norm_w, Act in, const TensorRef& gate, const TensorRef& up, FfnAct act) {
    norm(in, norm_w, Act::kXn);
    gated_matmul(gate, up, Act::kXn, act);
  }
  // The attention's inputs: Q's heads and then K's normed and rotated (head_norm_rope with q_norm, then
  // k_norm), then store_kv(layer). Each head's values depend on that head alone, and the store reads K
  // after its RoPE, so a backend that does all three in one kernel (a warp a head, K's warp storing its
  // head and V's after rotating it) computes the same operations in the same order.
  virtual void rope_store_kv(const TensorRef& q_norm, const TensorRef& k_norm, const RopeParams& rope, uint32_t layer) {
    head_norm_rope(Act::kQ, q_norm, rope);
    head_norm_rope(Act::kK, k_norm, rope);
    store_kv(layer);
  }
  // rope_store_kv, then attend(p): the token's own Q/K heads and cache row, then its attention. kK's
  // contents after it are unspecified (a kernel that rotates each K head in its attention's launch reads
  // K as the product wrote it in every block that needs it and writes only the cache). A token's values
  // are the same either way: its Q and K heads normed and rotated by the same operations, its K and V
  // rounded to halves as the cache stores them, then the same scores, softmax and sums.
  virtual void rope_store_attend(const TensorRef& q_norm, const TensorRef& k_norm, const RopeParams& rope, const AttnParams& p) {
    rope_store_kv(q_norm, k_norm, rope, p.layer);
    attend(p);
  }
  // x += y's RMS norm times w (a post-norm, then the residual add): norm y in place, then add. y's
  // contents after it are unspecified (a fused kernel adds the normed values without storing them).
  virtual void norm_add(Act y, const TensorRef& w, Act x) {
    norm(y, w, y);
    add(x, y);
  }
  // x += the routed FFN of x's RMS norm times norm_w (a MoE layer without post-norms): norm into kXn,
  // moe into kTmp, then add. kXn's and kTmp's contents after it are unspecified.
  virtual void norm_moe_add(const TensorRef& norm_w, const LayerWeights& l, Act x) {
    norm(x, norm_w, Act::kXn);
    moe(l, Act::kXn, Act::kTmp);
    add(x, Act::kTmp);
  }
  // x += (in W^T + bias)'s RMS norm times norm_w (a product, its post-norm and the residual add): matmul
  // into kTmp, then norm_add from it. kTmp's contents after it are unspecified.
  virtual void matmul_norm_add(const TensorRef& w, const TensorRef& bias, Act in, const TensorRef& norm_w, Act x) {
    matmul(w, bias, in, Act::kTmp);
    norm_add(Act::kTmp, norm_w, x);
  }

  // The pass's tokens: where each is (their ids and logit flags are the forward pass's, not the block's).
  // Throws std::runtime_error for none, more than the backend holds, a slot it has not, or a position
  // past the context. Set by the forward pass's embedding step, and by tests that hold one backend's
  // operations to another's (tests/gpu/test_llm_ops.cpp), with an activation's values (n tokens of its width).
  virtual void set_pass(std::span<const PassToken> tokens) = 0;
  // Sequence 0's tokens at pos0 .. pos0 + n - 1.
  void set_pass(uint32_t pos0, uint32_t n) { set_pass(one_sequence(std::vector<uint32_t>(n), pos0, false)); }
  virtual void write(Act a, std::span<const float> v) = 0;
  virtual std::vector<float> read(Act a) = 0;
};

// Layer l of the model on the pass's x: x = x + attention(norm(x)), then x = x + ffn(norm(x)).
void run_block(const ModelConfig& c, const LayerWeights& l, Backend& b);

// The width of activation a under config c.
uint32_t act_width(const ModelConfig& c, Act a);

}  // namespace gpunvme::llm
