#include "examples/llm/compute/block.h"

namespace gpunvme::llm {
namespace {

// x += attention(norm(x)).
void attention(const ModelConfig& c, const LayerWeights& l, Backend& b) {
  const Backend::Product qkv[] = {{l.wq, l.bq, Act::kQ}, {l.wk, l.bk, Act::kK}, {l.wv, l.bv, Act::kV}};
  b.norm_matmuls(l.attn_norm, Act::kX, qkv);
  const bool swa = c.layer_is_swa(l.index);
  const RopeParams rope = rope_params(c, swa ? c.rope_base_swa : c.rope_base);
  // Q and K normed per head and rotated; the whole pass's keys and values then go into the cache first:
  // a token attends to its sequence's positions up to its own only (causal), so it never sees the tokens
  // after it, nor another sequence's.
  b.rope_store_attend(c.qk_norm ? l.q_norm : TensorRef{}, c.qk_norm ? l.k_norm : TensorRef{}, rope,
                      {l.index, swa ? c.swa_window : 0, l.sinks});
  if (!c.post_norms) return b.matmul_add(l.wo, l.bo, Act::kAtt, Act::kX);
  b.matmul_norm_add(l.wo, l.bo, Act::kAtt, l.post_attn_norm, Act::kX);
}

// x += ffn(norm(x)).
void ffn(const ModelConfig& c, const LayerWeights& l, Backend& b) {
  if (c.is_moe()) {
    if (!c.post_norms) return b.norm_moe_add(l.ffn_norm, l, Act::kX);
    b.norm(Act::kX, l.ffn_norm, Act::kXn);
    b.moe(l, Act::kXn, Act::kTmp);
    return b.norm_add(Act::kTmp, l.post_ffw_norm, Act::kX);
  }
  b.norm_gated_matmul(l.ffn_norm, Act::kX, l.gate, l.up, c.act);
  if (!c.post_norms) return b.matmul_add(l.down, {}, Act::kGate, Act::kX);
  b.matmul_norm_add(l.down, {}, Act::kGate, l.post_ffw_norm, Act::kX);
}

}  // namespace

// The operations whose fused forms (block.h) a one-token pass on the GPU runs as one kernel each: the
// input norm with Q, K and V; Q/K norms, RoPE, the KV store and attention; the output projection with
// the residual add; the FFN's norm with gate, up and the GLU; the down projection with the residual add
// (5 launches a dense layer without post-norms); with post-norms, the O and down projections each with
// their post-norm and residual add (5 as well). A MoE layer without post-norms: its norm, routed FFN and
// add in 3 launches (gpu_moe_token.h) after the attention's 3. Q/K norms, RoPE and the KV store (without attention),
// and a post-norm with its add (a pass of several tokens, and MoE's output) are fused for passes of any size.
void run_block(const ModelConfig& c, const LayerWeights& l, Backend& b) {
  attention(c, l, b);
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
