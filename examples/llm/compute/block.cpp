#include "examples/llm/compute/block.h"

namespace gpunvme::llm {
namespace {

// tmp = the attention sublayer's output (post-normed where the model says), from x.
void attention(const ModelConfig& c, const LayerWeights& l, Backend& b) {
  const Backend::Product qkv[] = {{l.wq, l.bq, Act::kQ}, {l.wk, l.bk, Act::kK}, {l.wv, l.bv, Act::kV}};
  b.norm_matmuls(l.attn_norm, Act::kX, qkv);
  const bool swa = c.layer_is_swa(l.index);
  const RopeParams rope = rope_params(c, swa ? c.rope_base_swa : c.rope_base);
  b.head_norm_rope(Act::kQ, c.qk_norm ? l.q_norm : TensorRef{}, rope);
  b.head_norm_rope(Act::kK, c.qk_norm ? l.k_norm : TensorRef{}, rope);
  // The whole pass's keys and values go into the cache first; a token then attends to its sequence's
  // positions up to its own only (causal), so it never sees the tokens after it, nor another sequence's.
  b.store_kv(l.index);
  b.attend({l.index, swa ? c.swa_window : 0, l.sinks});
  b.matmul(l.wo, l.bo, Act::kAtt, Act::kTmp);
  if (c.post_norms) b.norm(Act::kTmp, l.post_attn_norm, Act::kTmp);
}

// From xn, the normed residual stream after attention.
void ffn(const ModelConfig& c, const LayerWeights& l, Backend& b) {
  if (c.is_moe()) {
    b.moe(l, Act::kXn, Act::kTmp);
  } else {
    b.gated_matmul(l.gate, l.up, Act::kXn, c.act);
    if (!c.post_norms) return b.matmul_add(l.down, Act::kGate, Act::kX);  // x += down(gate)
    b.matmul(l.down, {}, Act::kGate, Act::kTmp);
  }
  if (c.post_norms) b.norm(Act::kTmp, l.post_ffw_norm, Act::kTmp);
  b.add(Act::kX, Act::kTmp);
}

}  // namespace

// x = x + attention(norm(x)), then x = x + ffn(norm(x)); the first residual add and the FFN's norm in
// one operation (one kernel on the GPU).
void run_block(const ModelConfig& c, const LayerWeights& l, Backend& b) {
  attention(c, l, b);
  b.add_norm(Act::kX, Act::kTmp, l.ffn_norm, Act::kXn);
  ffn(c, l, b);
}

uint32_t act_width(const ModelConfig& c, Act a) {
  switch (a) {
    case Act::kQ: case Act::kAtt: return c.q_dim();
    case Act::kK: case Act::kV: return c.kv_dim();
    case Act::kGate: case Act::kUp: return c.n_ff;
    default: return c.n_embd;
  }
}

}  // namespace gpunvme::llm
