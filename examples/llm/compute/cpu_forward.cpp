#include "examples/llm/compute/cpu_forward.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "examples/llm/compute/batched_ops.h"
#include "examples/llm/compute/ops.h"
#include "examples/llm/compute/route.h"

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
  scores_.resize(n_ctx);
  reserve(1);
}

// Per-token buffers for a pass of n tokens (they only grow).
void CpuForward::reserve(uint32_t n) {
  if (n <= capacity_) return;
  capacity_ = n;
  for (auto* b : {&x_, &xn_, &tmp_, &gather_}) b->resize(size_t(n) * c_.n_embd);
  for (auto* b : {&q_, &att_}) b->resize(size_t(n) * c_.q_dim());
  for (auto* b : {&k_, &v_}) b->resize(size_t(n) * c_.kv_dim());
  for (auto* b : {&gate_, &up_}) b->resize(size_t(n) * c_.n_ff);
  moe_out_.resize(size_t(n) * std::max(1u, c_.n_expert_used) * c_.n_embd);
  part_.resize(n);
}

void CpuForward::matmul(const TensorRef& t, uint64_t mat, const float* x, uint32_t n, float* y) {
  const uint8_t* base = at(t) + mat * t.mat_bytes();
  for (uint64_t r = 0; r < t.rows; ++r)
    dot_row_batch(t.type, base + r * t.row_bytes(), t.cols, x, t.cols, n, part_.data(), y + r, t.rows);
}

void CpuForward::rms_norm(const float* x, const TensorRef& w, uint32_t n, float* out) const {
  double ss = 0.0;  // ggml sums squares in double (ggml_float)
  for (uint32_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(float(ss / n) + c_.rms_eps);
  const auto* g = reinterpret_cast<const float*>(at(w));
  for (uint32_t i = 0; i < n; ++i) out[i] = x[i] * scale * g[i];
}

// n consecutive vectors of `dim` (out may be x).
void CpuForward::rms_norm_rows(float* x, const TensorRef& w, uint32_t dim, uint32_t n, float* out) const {
  for (uint32_t t = 0; t < n; ++t) rms_norm(x + size_t(t) * dim, w, dim, out + size_t(t) * dim);
}

void CpuForward::attention(const LayerWeights& l, uint32_t pos0, uint32_t n) {
  const uint32_t E = c_.n_embd, Q = c_.q_dim(), KV = c_.kv_dim(), hd = c_.head_dim;
  rms_norm_rows(x_.data(), l.attn_norm, E, n, xn_.data());
  matmul(l.wq, 0, xn_.data(), n, q_.data());
  matmul(l.wk, 0, xn_.data(), n, k_.data());
  matmul(l.wv, 0, xn_.data(), n, v_.data());
  const bool swa = c_.layer_is_swa(l.index);
  const float base = swa ? c_.rope_base_swa : c_.rope_base;
  float* kc = &k_cache_[(size_t(l.index) * n_ctx_) * KV];
  float* vc = &v_cache_[(size_t(l.index) * n_ctx_) * KV];
  for (uint32_t t = 0; t < n; ++t) {
    float* q = &q_[size_t(t) * Q];
    float* k = &k_[size_t(t) * KV];
    float* v = &v_[size_t(t) * KV];
    if (l.bq.present) {
      add_into(q, reinterpret_cast<const float*>(at(l.bq)), Q);
      add_into(k, reinterpret_cast<const float*>(at(l.bk)), KV);
      add_into(v, reinterpret_cast<const float*>(at(l.bv)), KV);
    }
    for (uint32_t h = 0; h < c_.n_head; ++h) {
      if (c_.qk_norm) rms_norm(&q[h * hd], l.q_norm, hd, &q[h * hd]);
      rope_head(&q[h * hd], c_.n_rot, pos0 + t, base, c_.rope);
    }
    for (uint32_t h = 0; h < c_.n_head_kv; ++h) {
      if (c_.qk_norm) rms_norm(&k[h * hd], l.k_norm, hd, &k[h * hd]);
      rope_head(&k[h * hd], c_.n_rot, pos0 + t, base, c_.rope);
    }
    // The whole batch's keys and values go into the cache first; token t then attends to positions
    // <= pos0 + t only (causal), so it never sees the tokens after it.
    for (uint32_t i = 0; i < KV; ++i) {
      kc[size_t(pos0 + t) * KV + i] = round_f16(k[i]);
      vc[size_t(pos0 + t) * KV + i] = round_f16(v[i]);
    }
  }
  for (uint32_t t = 0; t < n; ++t) attend(&q_[size_t(t) * Q], l.index, pos0 + t, swa, &att_[size_t(t) * Q]);
  matmul(l.wo, 0, att_.data(), n, tmp_.data());
  if (c_.post_norms) rms_norm_rows(tmp_.data(), l.post_attn_norm, E, n, tmp_.data());
  add_into(x_.data(), tmp_.data(), n * E);
}

// One token's attention at `pos` over the cached positions it may see (a sliding window on SWA layers).
void CpuForward::attend(const float* q, uint32_t layer, uint32_t pos, bool swa, float* att) {
  const uint32_t KV = c_.kv_dim(), hd = c_.head_dim;
  const float* kc = &k_cache_[(size_t(layer) * n_ctx_) * KV];
  const float* vc = &v_cache_[(size_t(layer) * n_ctx_) * KV];
  const uint32_t first = swa && pos + 1 > c_.swa_window ? pos + 1 - c_.swa_window : 0;
  const uint32_t group = c_.n_head / c_.n_head_kv;
  for (uint32_t h = 0; h < c_.n_head; ++h) {
    const float* qh = &q[h * hd];
    const uint32_t kvh = h / group;
    float mx = -INFINITY;
    for (uint32_t p = first; p <= pos; ++p) {
      const float* kp = &kc[size_t(p) * KV + kvh * hd];
      float s = 0.0f;
      for (uint32_t i = 0; i < hd; ++i) s += qh[i] * kp[i];
      scores_[p] = s * c_.attn_scale;
      mx = std::max(mx, scores_[p]);
    }
    float sum = 0.0f;
    for (uint32_t p = first; p <= pos; ++p) sum += (scores_[p] = std::exp(scores_[p] - mx));
    float* out = &att[h * hd];
    std::fill(out, out + hd, 0.0f);
    for (uint32_t p = first; p <= pos; ++p) {
      const float wgt = scores_[p] / sum;
      const float* vp = &vc[size_t(p) * KV + kvh * hd];
      for (uint32_t i = 0; i < hd; ++i) out[i] += wgt * vp[i];
    }
  }
}

void CpuForward::ffn(const LayerWeights& l, uint32_t n) {
  const uint32_t E = c_.n_embd;
  rms_norm_rows(x_.data(), l.ffn_norm, E, n, xn_.data());
  if (c_.is_moe()) {
    moe(l, n);
  } else {
    matmul(l.gate, 0, xn_.data(), n, gate_.data());
    matmul(l.up, 0, xn_.data(), n, up_.data());
    for (size_t i = 0; i < size_t(n) * c_.n_ff; ++i) gate_[i] = act(c_.act, gate_[i]) * up_[i];
    matmul(l.down, 0, gate_.data(), n, tmp_.data());
  }
  if (c_.post_norms) rms_norm_rows(tmp_.data(), l.post_ffw_norm, E, n, tmp_.data());
  add_into(x_.data(), tmp_.data(), n * E);
}

// Each token routed by route.h (the GPU kernels' routing). Each expert runs once for all the tokens of
// the pass that chose it; each token then adds its experts' outputs in its own top-k order (the order
// a pass of that token alone adds them).
void CpuForward::moe(const LayerWeights& l, uint32_t n) {
  const uint32_t E = c_.n_embd, K = c_.n_expert_used, F = c_.n_ff;
  std::vector<float> probs(size_t(n) * c_.n_expert);
  matmul(l.gate_inp, 0, xn_.data(), n, probs.data());
  std::vector<uint32_t> chosen(size_t(n) * K);  // [token][k] expert id
  std::vector<float> weight(size_t(n) * K);
  std::vector<float> p(c_.n_expert);
  for (uint32_t t = 0; t < n; ++t)
    route_top_k(OneLane{}, &probs[size_t(t) * c_.n_expert], c_.n_expert, K, p.data(), &chosen[size_t(t) * K],
                &weight[size_t(t) * K]);
  std::vector<uint32_t> users;  // (token, k) slots that chose expert e, as t * K + k
  for (uint32_t e = 0; e < c_.n_expert; ++e) {
    users.clear();
    for (uint32_t s = 0; s < n * K; ++s)
      if (chosen[s] == e) users.push_back(s);
    if (users.empty()) continue;
    const uint32_t m = uint32_t(users.size());
    for (uint32_t j = 0; j < m; ++j) std::copy_n(&xn_[size_t(users[j] / K) * E], E, &gather_[size_t(j) * E]);
    matmul(l.gate_exps, e, gather_.data(), m, gate_.data());
    matmul(l.up_exps, e, gather_.data(), m, up_.data());
    for (size_t i = 0; i < size_t(m) * F; ++i) gate_[i] = act(c_.act, gate_[i]) * up_[i];
    matmul(l.down_exps, e, gate_.data(), m, tmp_.data());
    for (uint32_t j = 0; j < m; ++j) std::copy_n(&tmp_[size_t(j) * E], E, &moe_out_[size_t(users[j]) * E]);
  }
  for (uint32_t t = 0; t < n; ++t) {
    float* y = &tmp_[size_t(t) * E];
    std::fill(y, y + E, 0.0f);
    for (uint32_t k = 0; k < K; ++k) {
      const float wgt = weight[size_t(t) * K + k];
      const float* o = &moe_out_[(size_t(t) * K + k) * E];
      for (uint32_t i = 0; i < E; ++i) y[i] += wgt * o[i];
    }
  }
}

std::span<const float> CpuForward::eval_batch(std::span<const uint32_t> tokens, uint32_t pos0, bool all_logits) {
  const uint32_t n = uint32_t(tokens.size());
  if (n == 0) throw std::runtime_error("a pass needs at least one token");
  for (uint32_t id : tokens)
    if (id >= c_.n_vocab) throw std::runtime_error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(c_.n_vocab) + " tokens)");
  if (uint64_t(pos0) + n > n_ctx_)
    throw std::runtime_error("position " + std::to_string(uint64_t(pos0) + n - 1) + " is past the context (" + std::to_string(n_ctx_) + " tokens)");
  reserve(n);
  const TensorRef& e = w_.token_embd;
  float g[kGroup];
  for (uint32_t t = 0; t < n; ++t)
    for (uint64_t i = 0; i < c_.n_embd / kGroup; ++i) {
      dequant_group(e.type, at(e) + uint64_t(tokens[t]) * e.row_bytes(), i, g);
      for (int j = 0; j < kGroup; ++j) x_[size_t(t) * c_.n_embd + i * kGroup + j] = g[j] * c_.embd_scale;
    }
  for (const LayerWeights& l : w_.layers) {
    attention(l, pos0, n);
    ffn(l, n);
  }
  const uint32_t first = all_logits ? 0 : n - 1, rows = n - first;
  rms_norm_rows(&x_[size_t(first) * c_.n_embd], w_.output_norm, c_.n_embd, rows, xn_.data());
  logits_.resize(size_t(rows) * c_.n_vocab);
  matmul(w_.output, 0, xn_.data(), rows, logits_.data());
  return logits_;
}

const std::vector<float>& CpuForward::eval(uint32_t token, uint32_t pos) {
  eval_batch(std::span(&token, 1), pos, true);
  return logits_;
}

}  // namespace gpunvme::llm
