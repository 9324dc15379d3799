#include "examples/llm/compute/cpu_forward.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "examples/llm/compute/ops.h"

namespace gpunvme::llm {
namespace {

// Round to the nearest half and back (the KV cache is f16 in llama.cpp).
float round_f16(float x) {
  _Float16 h = static_cast<_Float16>(x);
  return static_cast<float>(h);
}

void add_into(float* y, const float* x, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace

CpuForward::CpuForward(const ModelConfig& c, const ModelWeights& w, std::span<const uint8_t> file, uint32_t n_ctx)
    : c_(c), w_(w), file_(file), n_ctx_(n_ctx) {
  const size_t kv = size_t(c.n_layer) * n_ctx * c.kv_dim();
  k_cache_.assign(kv, 0.0f);
  v_cache_.assign(kv, 0.0f);
  x_.resize(c.n_embd);
  xn_.resize(c.n_embd);
  tmp_.resize(c.n_embd);
  moe_out_.resize(c.n_embd);
  q_.resize(c.q_dim());
  att_.resize(c.q_dim());
  k_.resize(c.kv_dim());
  v_.resize(c.kv_dim());
  gate_.resize(c.n_ff);
  up_.resize(c.n_ff);
  scores_.resize(n_ctx);
  logits_.resize(c.n_vocab);
}

void CpuForward::matvec(const TensorRef& t, uint64_t mat, const float* x, float* y) const {
  const uint8_t* base = at(t) + mat * t.mat_bytes();
  for (uint64_t r = 0; r < t.rows; ++r) y[r] = dot_row(t.type, base + r * t.row_bytes(), t.cols, x);
}

void CpuForward::rms_norm(const float* x, const TensorRef& w, uint32_t n, float* out) const {
  double ss = 0.0;  // ggml sums squares in double (ggml_float)
  for (uint32_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(float(ss / n) + c_.rms_eps);
  const auto* g = reinterpret_cast<const float*>(at(w));
  for (uint32_t i = 0; i < n; ++i) out[i] = x[i] * scale * g[i];
}

void CpuForward::attention(const LayerWeights& l, uint32_t pos) {
  rms_norm(x_.data(), l.attn_norm, c_.n_embd, xn_.data());
  matvec(l.wq, 0, xn_.data(), q_.data());
  matvec(l.wk, 0, xn_.data(), k_.data());
  matvec(l.wv, 0, xn_.data(), v_.data());
  if (l.bq.present) {
    add_into(q_.data(), reinterpret_cast<const float*>(at(l.bq)), c_.q_dim());
    add_into(k_.data(), reinterpret_cast<const float*>(at(l.bk)), c_.kv_dim());
    add_into(v_.data(), reinterpret_cast<const float*>(at(l.bv)), c_.kv_dim());
  }
  const bool swa = c_.layer_is_swa(l.index);
  const float base = swa ? c_.rope_base_swa : c_.rope_base;
  const uint32_t hd = c_.head_dim;
  for (uint32_t h = 0; h < c_.n_head; ++h) {
    if (c_.qk_norm) rms_norm(&q_[h * hd], l.q_norm, hd, &q_[h * hd]);
    rope_head(&q_[h * hd], hd, pos, base, c_.rope);
  }
  for (uint32_t h = 0; h < c_.n_head_kv; ++h) {
    if (c_.qk_norm) rms_norm(&k_[h * hd], l.k_norm, hd, &k_[h * hd]);
    rope_head(&k_[h * hd], hd, pos, base, c_.rope);
  }
  float* kc = &k_cache_[(size_t(l.index) * n_ctx_) * c_.kv_dim()];
  float* vc = &v_cache_[(size_t(l.index) * n_ctx_) * c_.kv_dim()];
  for (uint32_t i = 0; i < c_.kv_dim(); ++i) {
    kc[size_t(pos) * c_.kv_dim() + i] = round_f16(k_[i]);
    vc[size_t(pos) * c_.kv_dim() + i] = round_f16(v_[i]);
  }
  const uint32_t first = swa && pos + 1 > c_.swa_window ? pos + 1 - c_.swa_window : 0;
  const uint32_t group = c_.n_head / c_.n_head_kv;
  for (uint32_t h = 0; h < c_.n_head; ++h) {
    const float* qh = &q_[h * hd];
    const uint32_t kvh = h / group;
    float mx = -INFINITY;
    for (uint32_t p = first; p <= pos; ++p) {
      const float* kp = &kc[size_t(p) * c_.kv_dim() + kvh * hd];
      float s = 0.0f;
      for (uint32_t i = 0; i < hd; ++i) s += qh[i] * kp[i];
      scores_[p] = s * c_.attn_scale;
      mx = std::max(mx, scores_[p]);
    }
    float sum = 0.0f;
    for (uint32_t p = first; p <= pos; ++p) sum += (scores_[p] = std::exp(scores_[p] - mx));
    float* out = &att_[h * hd];
    std::fill(out, out + hd, 0.0f);
    for (uint32_t p = first; p <= pos; ++p) {
      const float wgt = scores_[p] / sum;
      const float* vp = &vc[size_t(p) * c_.kv_dim() + kvh * hd];
      for (uint32_t i = 0; i < hd; ++i) out[i] += wgt * vp[i];
    }
  }
  matvec(l.wo, 0, att_.data(), tmp_.data());
  if (c_.post_norms) rms_norm(tmp_.data(), l.post_attn_norm, c_.n_embd, tmp_.data());
  add_into(x_.data(), tmp_.data(), c_.n_embd);
}

void CpuForward::ffn(const LayerWeights& l) {
  rms_norm(x_.data(), l.ffn_norm, c_.n_embd, xn_.data());
  if (c_.is_moe()) {
    moe(l);
  } else {
    matvec(l.gate, 0, xn_.data(), gate_.data());
    matvec(l.up, 0, xn_.data(), up_.data());
    for (uint32_t i = 0; i < c_.n_ff; ++i) gate_[i] = act(c_.act, gate_[i]) * up_[i];
    matvec(l.down, 0, gate_.data(), tmp_.data());
  }
  if (c_.post_norms) rms_norm(tmp_.data(), l.post_ffw_norm, c_.n_embd, tmp_.data());
  add_into(x_.data(), tmp_.data(), c_.n_embd);
}

// Mixtral-style: softmax over the router's logits, the top n_expert_used, weights renormalised to sum 1.
void CpuForward::moe(const LayerWeights& l) {
  std::vector<float> probs(c_.n_expert);
  matvec(l.gate_inp, 0, xn_.data(), probs.data());
  const float mx = *std::max_element(probs.begin(), probs.end());
  float sum = 0.0f;
  for (float& p : probs) sum += (p = std::exp(p - mx));
  for (float& p : probs) p /= sum;
  std::vector<uint32_t> order(c_.n_expert);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return probs[a] > probs[b]; });
  float wsum = 0.0f;
  for (uint32_t k = 0; k < c_.n_expert_used; ++k) wsum += probs[order[k]];
  std::fill(tmp_.begin(), tmp_.end(), 0.0f);
  for (uint32_t k = 0; k < c_.n_expert_used; ++k) {
    const uint32_t e = order[k];
    matvec(l.gate_exps, e, xn_.data(), gate_.data());
    matvec(l.up_exps, e, xn_.data(), up_.data());
    for (uint32_t i = 0; i < c_.n_ff; ++i) gate_[i] = act(c_.act, gate_[i]) * up_[i];
    matvec(l.down_exps, e, gate_.data(), moe_out_.data());
    const float wgt = probs[e] / wsum;
    for (uint32_t i = 0; i < c_.n_embd; ++i) tmp_[i] += wgt * moe_out_[i];
  }
}

const std::vector<float>& CpuForward::eval(uint32_t token, uint32_t pos) {
  if (token >= c_.n_vocab) throw std::runtime_error("token id " + std::to_string(token) + " is outside the vocabulary (" + std::to_string(c_.n_vocab) + " tokens)");
  if (pos >= n_ctx_) throw std::runtime_error("position " + std::to_string(pos) + " is past the context (" + std::to_string(n_ctx_) + " tokens)");
  const TensorRef& e = w_.token_embd;
  float g[kGroup];
  for (uint64_t i = 0; i < c_.n_embd / kGroup; ++i) {
    dequant_group(e.type, at(e) + uint64_t(token) * e.row_bytes(), i, g);
    for (int j = 0; j < kGroup; ++j) x_[i * kGroup + j] = g[j] * c_.embd_scale;
  }
  for (const LayerWeights& l : w_.layers) {
    attention(l, pos);
    ffn(l);
  }
  rms_norm(x_.data(), w_.output_norm, c_.n_embd, xn_.data());
  matvec(w_.output, 0, xn_.data(), logits_.data());
  return logits_;
}

}  // namespace gpunvme::llm
