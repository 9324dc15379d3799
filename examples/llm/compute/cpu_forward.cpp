#include "examples/llm/compute/cpu_forward.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "examples/llm/compute/batched_ops.h"
#include "examples/llm/compute/ops.h"
#include "examples/llm/compute/route.h"
#include "examples/llm/quant/llamacpp_rounding.h"

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

CpuForward::CpuForward(const ModelConfig& c, const ModelWeights& w, std::span<const uint8_t> file, uint32_t n_ctx, uint32_t n_seqs,
                       uint32_t max_batch)
    : c_(c), w_(w), file_(file), n_ctx_(n_ctx), slots_(n_seqs, n_ctx), max_batch_(max_batch),
      rounding_(llamacpp_rounding_from_env()) {
  const size_t kv = size_t(c.n_layer) * n_seqs * n_ctx * c.kv_dim();
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

float* CpuForward::buf(Act a) {
  switch (a) {
    case Act::kX: return x_.data();
    case Act::kXn: return xn_.data();
    case Act::kQ: return q_.data();
    case Act::kK: return k_.data();
    case Act::kV: return v_.data();
    case Act::kAtt: return att_.data();
    case Act::kTmp: return tmp_.data();
    case Act::kGate: return gate_.data();
    case Act::kUp: return up_.data();
  }
  throw std::logic_error("no such activation");
}

void CpuForward::matmul_rows(const TensorRef& t, uint64_t mat, const float* x, uint32_t n, float* y) {
  const uint8_t* base = at(t) + mat * t.mat_bytes();
  if (rounding_.q8_0_for(t.type) || rounding_.f16_for(t.type)) {  // the diagnostic of quant/llamacpp_rounding.h
    rounded_.resize(size_t(n) * t.cols);
    if (rounding_.f16_for(t.type))
      round_to_half(x, size_t(n) * t.cols, rounded_.data());
    else
      round_to_q8_0(x, size_t(n) * t.cols, rounded_.data());
    x = rounded_.data();
  }
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

void CpuForward::norm(Act in, const TensorRef& w, Act out) { rms_norm_rows(buf(in), w, c_.n_embd, n_, buf(out)); }

void CpuForward::add_bias(const TensorRef& t, uint64_t mat, uint32_t n, float* y) const {
  if (!t.present) return;
  const auto* b = reinterpret_cast<const float*>(at(t) + mat * t.mat_bytes());
  for (uint32_t r = 0; r < n; ++r) add_into(y + size_t(r) * t.cols, b, uint32_t(t.cols));
}

void CpuForward::matmul(const TensorRef& w, const TensorRef& bias, Act in, Act out) {
  float* y = buf(out);
  matmul_rows(w, 0, buf(in), n_, y);
  add_bias(bias, 0, n_, y);
}

void CpuForward::head_norm_rope(Act qk, const TensorRef& norm, const RopeParams& rope) {
  const uint32_t hd = c_.head_dim, width = act_width(c_, qk), heads = width / hd;
  for (uint32_t t = 0; t < n_; ++t)
    for (uint32_t h = 0; h < heads; ++h) {
      float* head = buf(qk) + size_t(t) * width + h * hd;
      if (norm.present) rms_norm(head, norm, hd, head);
      rope_head(head, c_.n_rot, pass_[t].pos, rope, c_.rope);
    }
}

void CpuForward::store_kv(uint32_t layer) {
  const uint32_t KV = c_.kv_dim();
  for (uint32_t t = 0; t < n_; ++t) {
    const size_t at = kv_row(layer, pass_[t].seq, pass_[t].pos);
    for (uint32_t i = 0; i < KV; ++i) {
      k_cache_[at + i] = round_f16(k_[size_t(t) * KV + i]);
      v_cache_[at + i] = round_f16(v_[size_t(t) * KV + i]);
    }
  }
}

void CpuForward::attend(const AttnParams& p) {
  const uint32_t Q = c_.q_dim();
  const float* sinks = p.sinks.present ? reinterpret_cast<const float*>(at(p.sinks)) : nullptr;
  for (uint32_t t = 0; t < n_; ++t)
    attend_token(&q_[size_t(t) * Q], p.layer, pass_[t], p.window, sinks, &att_[size_t(t) * Q]);
}

// One token's attention at its position over the cached positions of its sequence it may see (the last
// `window`, 0: all); with `sinks`, head h's softmax has sinks[h] beside the scores (ops.h's with_sink_*).
void CpuForward::attend_token(const float* q, uint32_t layer, const PassToken& at, uint32_t window, const float* sinks, float* att) {
  const uint32_t KV = c_.kv_dim(), hd = c_.head_dim, pos = at.pos;
  const float* kc = &k_cache_[kv_row(layer, at.seq, 0)];
  const float* vc = &v_cache_[kv_row(layer, at.seq, 0)];
  const uint32_t first = window && pos + 1 > window ? pos + 1 - window : 0;
  const uint32_t group = c_.n_head / c_.n_head_kv;
  std::vector<float> q_half(rounding_.attention ? hd : 0);
  for (uint32_t h = 0; h < c_.n_head; ++h) {
    const float* qh = &q[h * hd];
    if (rounding_.attention) {  // llama.cpp's Q as halves (quant/llamacpp_rounding.h)
      round_to_half(qh, hd, q_half.data());
      qh = q_half.data();
    }
    const uint32_t kvh = h / group;
    float mx = -INFINITY;
    for (uint32_t p = first; p <= pos; ++p) {
      const float* kp = &kc[size_t(p) * KV + kvh * hd];
      float s = 0.0f;
      for (uint32_t i = 0; i < hd; ++i) s += qh[i] * kp[i];
      scores_[p] = s * c_.attn_scale;
      mx = std::max(mx, scores_[p]);
    }
    const float sink = sinks ? sinks[h] : -INFINITY;
    mx = with_sink_max(mx, sink);
    float sum = 0.0f;
    for (uint32_t p = first; p <= pos; ++p) sum += (scores_[p] = std::exp(scores_[p] - mx));
    sum = with_sink_sum(sum, sink, mx);
    float* out = &att[h * hd];
    std::fill(out, out + hd, 0.0f);
    for (uint32_t p = first; p <= pos; ++p) {
      const float wgt = rounding_.attention ? round_to_half(scores_[p] / sum) : scores_[p] / sum;
      const float* vp = &vc[size_t(p) * KV + kvh * hd];
      for (uint32_t i = 0; i < hd; ++i) out[i] += wgt * vp[i];
    }
  }
}

void CpuForward::glu(Act gate, Act up, FfnAct a) {
  float* g = buf(gate);
  const float* u = buf(up);
  for (size_t i = 0; i < size_t(n_) * c_.n_ff; ++i) g[i] = llm::glu(a, g[i], u[i]);
}

void CpuForward::add(Act x, Act y) { add_into(buf(x), buf(y), n_ * act_width(c_, x)); }

// Each token routed by route.h (the GPU kernels' routing). Each expert runs once for all the tokens of
// the pass that chose it; each token then adds its experts' outputs in its own top-k order (the order
// a pass of that token alone adds them). tmp_, gate_ and up_ are its scratch: `in` may not be one.
void CpuForward::moe(const LayerWeights& l, Act in, Act out) {
  const uint32_t n = n_, E = c_.n_embd, K = c_.n_expert_used, F = c_.n_ff;
  const float* xn = buf(in);
  std::vector<float> probs(size_t(n) * c_.n_expert);
  matmul_rows(l.gate_inp, 0, xn, n, probs.data());
  add_bias(l.gate_inp_b, 0, n, probs.data());
  std::vector<uint32_t> chosen(size_t(n) * K);  // [token][k] expert id
  std::vector<float> weight(size_t(n) * K);
  std::vector<float> p(c_.n_expert);
  for (uint32_t t = 0; t < n; ++t)
    route_top_k(OneLane{}, &probs[size_t(t) * c_.n_expert], c_.n_expert, K, c_.gating, p.data(), &chosen[size_t(t) * K],
                &weight[size_t(t) * K]);
  std::vector<uint32_t> users;  // (token, k) slots that chose expert e, as t * K + k
  for (uint32_t e = 0; e < c_.n_expert; ++e) {
    users.clear();
    for (uint32_t s = 0; s < n * K; ++s)
      if (chosen[s] == e) users.push_back(s);
    if (users.empty()) continue;
    const uint32_t m = uint32_t(users.size());
    for (uint32_t j = 0; j < m; ++j) std::copy_n(&xn[size_t(users[j] / K) * E], E, &gather_[size_t(j) * E]);
    matmul_rows(l.gate_exps, e, gather_.data(), m, gate_.data());
    add_bias(l.gate_exps_b, e, m, gate_.data());
    matmul_rows(l.up_exps, e, gather_.data(), m, up_.data());
    add_bias(l.up_exps_b, e, m, up_.data());
    for (size_t i = 0; i < size_t(m) * F; ++i) gate_[i] = llm::glu(c_.act, gate_[i], up_[i]);
    matmul_rows(l.down_exps, e, gate_.data(), m, tmp_.data());
    add_bias(l.down_exps_b, e, m, tmp_.data());
    for (uint32_t j = 0; j < m; ++j) std::copy_n(&tmp_[size_t(j) * E], E, &moe_out_[size_t(users[j]) * E]);
  }
  for (uint32_t t = 0; t < n; ++t) {
    float* y = buf(out) + size_t(t) * E;
    std::fill(y, y + E, 0.0f);
    for (uint32_t k = 0; k < K; ++k) {
      const float wgt = weight[size_t(t) * K + k];
      const float* o = &moe_out_[(size_t(t) * K + k) * E];
      for (uint32_t i = 0; i < E; ++i) y[i] += wgt * o[i];
    }
  }
}

std::span<const float> CpuForward::eval_batch(std::span<const PassToken> pass) {
  for (const PassToken& t : pass)
    if (t.id >= c_.n_vocab) throw std::runtime_error("token id " + std::to_string(t.id) + " is outside the vocabulary (" + std::to_string(c_.n_vocab) + " tokens)");
  slots_.check(pass, max_batch_);  // before anything changes: a refused pass leaves the slots as they were
  set_pass(pass);
  slots_.commit(pass);
  const TensorRef& e = w_.token_embd;
  float g[kGroup];
  for (uint32_t t = 0; t < n_; ++t)
    for (uint64_t i = 0; i < c_.n_embd / kGroup; ++i) {
      dequant_group(e.type, at(e) + uint64_t(pass[t].id) * e.row_bytes(), i, g);
      for (int j = 0; j < kGroup; ++j) x_[size_t(t) * c_.n_embd + i * kGroup + j] = g[j] * c_.embd_scale;
    }
  for (const LayerWeights& l : w_.layers) run_block(c_, l, *this);
  // The flagged tokens' rows, normed into xn_ side by side, through the output head at once.
  uint32_t rows = 0;
  for (uint32_t t = 0; t < n_; ++t)
    if (pass[t].logits) rms_norm(&x_[size_t(t) * c_.n_embd], w_.output_norm, c_.n_embd, &xn_[size_t(rows++) * c_.n_embd]);
  logits_.resize(size_t(rows) * c_.n_vocab);
  if (rows) matmul_rows(w_.output, 0, xn_.data(), rows, logits_.data());
  return logits_;
}

std::span<const float> CpuForward::eval_batch(std::span<const uint32_t> tokens, uint32_t pos0, bool all_logits) {
  return eval_batch(one_sequence(tokens, pos0, all_logits));
}

const std::vector<float>& CpuForward::eval(uint32_t token, uint32_t pos) {
  eval_batch(std::span(&token, 1), pos, true);
  return logits_;
}

void CpuForward::set_pass(std::span<const PassToken> tokens) {
  slots_.check_places(tokens, max_batch_);
  reserve(uint32_t(tokens.size()));
  pass_.assign(tokens.begin(), tokens.end());
  n_ = uint32_t(tokens.size());
}

void CpuForward::write(Act a, std::span<const float> v) {
  if (v.size() != size_t(n_) * act_width(c_, a)) throw std::logic_error("write: not one row per token of the pass");
  std::copy(v.begin(), v.end(), buf(a));
}

std::vector<float> CpuForward::read(Act a) {
  const float* p = buf(a);
  return std::vector<float>(p, p + size_t(n_) * act_width(c_, a));
}

}  // namespace gpunvme::llm
