// Small random-weight models in memory for the engine's C++ tests: a ModelConfig, a ModelWeights and
// the bytes the TensorRefs point into, for every architecture rule the forward pass has (GQA, QKV bias,
// QK norm, post-norms, GeGLU, sliding-window layers, MoE) and every weight type it computes. Weights
// are random bytes with finite block scales, so every dequantized value is a finite float.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "examples/llm/model/weights.h"
#include "runtime/gguf/ggml_types.h"

namespace gpunvme::llm::test {

inline uint16_t to_half(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

inline uint16_t to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return uint16_t(b >> 16);
}

// `rows` rows of `cols` weights of type t (cols a multiple of the type's block), random with finite scales.
inline std::vector<uint8_t> random_rows(GgmlType t, uint64_t cols, uint64_t rows, std::mt19937& rng) {
  const auto info = gguf::ggml_type_info(uint32_t(t));
  if (!info || cols % info->block_size) throw std::logic_error("random_rows: bad type or width");
  const uint64_t blocks = cols / info->block_size * rows;
  std::vector<uint8_t> out(blocks * info->type_size);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), scale(0.002f, 0.05f);
  for (auto& b : out) b = uint8_t(rng());
  auto put16 = [&](uint64_t at, uint16_t v) { std::memcpy(&out[at], &v, 2); };
  for (uint64_t i = 0; i < blocks; ++i) {
    const uint64_t at = i * info->type_size;
    switch (t) {
      case GgmlType::F32: { const float f = u(rng); std::memcpy(&out[at], &f, 4); break; }
      case GgmlType::F16: put16(at, to_half(u(rng))); break;
      case GgmlType::BF16: put16(at, to_bf16(u(rng))); break;
      case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: put16(at, to_half(scale(rng))); break;
      case GgmlType::Q4_K: case GgmlType::Q5_K: put16(at, to_half(scale(rng) / 16)); put16(at + 2, to_half(scale(rng) / 16)); break;
      case GgmlType::Q6_K: put16(at + info->type_size - 2, to_half(scale(rng) / 16)); break;
      case GgmlType::MXFP4: out[at] = uint8_t(118 + rng() % 8); break;  // scales 2^-10 .. 2^-3 (E8M0, halved)
      default: throw std::logic_error("random_rows: type not computed by the engine");
    }
  }
  return out;
}

// n random token ids of a vocabulary of `vocab`.
inline std::vector<uint32_t> random_tokens(uint32_t n, uint32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> t(n);
  for (auto& x : t) x = rng() % vocab;
  return t;
}

// The same floats to the bit (what the engine's numbers are held to across pass shapes).
inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

enum class Shape { kLlama, kQwen2, kGemma3, kMoe, kQwen3Moe, kGptOss };

struct TinyModel {
  ModelConfig c;
  ModelWeights w;
  std::vector<uint8_t> bytes;
};

// A model of 2 layers, n_embd 256 (k-quant rows are 256 wide), 4 query heads of 64 over 2 KV heads
// (kQwen3Moe: heads of 128, wider than 256 / 4 as Qwen3's, and 4 experts of 256 beside a dense width of 512).
inline TinyModel make_tiny(Shape shape, GgmlType type, uint32_t seed = 1) {
  TinyModel m;
  ModelConfig& c = m.c;
  c.arch = shape == Shape::kQwen2 ? Arch::kQwen2 : shape == Shape::kGemma3 ? Arch::kGemma3
         : shape == Shape::kQwen3Moe ? Arch::kQwen3Moe : shape == Shape::kGptOss ? Arch::kGptOss : Arch::kLlama;
  c.n_embd = 256, c.n_layer = 2, c.n_head = 4, c.n_head_kv = 2, c.head_dim = 64, c.n_ff = 512, c.n_vocab = 300;
  c.n_ctx_train = 64;
  c.n_rot = c.head_dim;
  c.rms_eps = 1e-6f;
  c.attn_scale = 1.0f / std::sqrt(float(c.head_dim));
  if (shape != Shape::kLlama && shape != Shape::kMoe) c.rope = RopeLayout::kNeox;  // (gpt-oss too)
  if (shape == Shape::kMoe) c.n_expert = 4, c.n_expert_used = 2;
  if (shape == Shape::kQwen3Moe) {  // model/config.cpp's qwen3moe rules
    c.head_dim = c.n_rot = 128;
    c.attn_scale = 1.0f / std::sqrt(float(c.head_dim));
    c.rope_base = 1e6f;
    c.qk_norm = true;
    c.n_expert = 4, c.n_expert_used = 2, c.n_ff = 256;
  }
  if (shape == Shape::kGptOss) {  // arch/gpt_oss.cpp's rules, YaRN as gpt-oss's GGUFs set it (factor 32 over 4096)
    c.rope_base = 150000.0f;
    c.yarn.freq_scale = 1.0f / 32.0f, c.yarn.ext_factor = 1.0f, c.yarn.n_ctx_orig = 4096;
    c.swa_window = 5, c.swa_period = 2;  // layer 0 sees the last 5 positions, layer 1 all
    c.n_expert = 4, c.n_expert_used = 2, c.n_ff = 256;
    c.act = FfnAct::kSwigluOai;
    c.gating = Gating::kSoftmaxSelected;
    c.sinks = c.biases = true;
  }
  if (shape == Shape::kGemma3) {
    c.rope_base = 1e6f;
    c.swa_window = 5, c.swa_period = 2;  // layer 0 sees the last 5 positions, layer 1 all
    c.embd_scale = std::sqrt(float(c.n_embd));
    c.act = FfnAct::kGelu;
    c.qk_norm = c.post_norms = true;
  }
  std::mt19937 rng(seed);
  auto add = [&](GgmlType t, uint64_t cols, uint64_t rows, uint64_t mats = 1) {
    m.bytes.resize((m.bytes.size() + 31) / 32 * 32);
    TensorRef r{t, cols, rows, mats, m.bytes.size(), 0, true};
    const auto data = random_rows(t, cols, rows * mats, rng);
    r.bytes = data.size();
    m.bytes.insert(m.bytes.end(), data.begin(), data.end());
    return r;
  };
  auto norm = [&](uint64_t n) {  // F32 gains around 1
    TensorRef r = add(GgmlType::F32, n, 1);
    std::uniform_real_distribution<float> g(0.5f, 1.5f);
    for (uint64_t i = 0; i < n; ++i) {
      const float f = g(rng);
      std::memcpy(&m.bytes[r.file_offset + 4 * i], &f, 4);
    }
    return r;
  };
  m.w.token_embd = add(type, c.n_embd, c.n_vocab);
  for (uint32_t i = 0; i < c.n_layer; ++i) {
    LayerWeights l;
    l.index = i;
    l.begin = m.bytes.size();
    l.attn_norm = norm(c.n_embd);
    l.wq = add(type, c.n_embd, c.q_dim());
    l.wk = add(type, c.n_embd, c.kv_dim());
    l.wv = add(type, c.n_embd, c.kv_dim());
    l.wo = add(type, c.q_dim(), c.n_embd);
    if (shape == Shape::kQwen2 || c.biases) {
      l.bq = add(GgmlType::F32, c.q_dim(), 1);
      l.bk = add(GgmlType::F32, c.kv_dim(), 1);
      l.bv = add(GgmlType::F32, c.kv_dim(), 1);
    }
    if (c.biases) l.bo = add(GgmlType::F32, c.n_embd, 1);
    if (c.sinks) l.sinks = add(GgmlType::F32, c.n_head, 1);  // uniform in [-1, 1]: comparable to the scores
    if (c.qk_norm) l.q_norm = norm(c.head_dim), l.k_norm = norm(c.head_dim);
    if (c.post_norms) l.post_attn_norm = norm(c.n_embd), l.post_ffw_norm = norm(c.n_embd);
    l.ffn_norm = norm(c.n_embd);
    if (c.is_moe()) {
      l.gate_inp = add(GgmlType::F32, c.n_embd, c.n_expert);
      l.gate_exps = add(type, c.n_embd, c.n_ff, c.n_expert);
      l.up_exps = add(type, c.n_embd, c.n_ff, c.n_expert);
      l.down_exps = add(type, c.n_ff, c.n_embd, c.n_expert);
      if (c.biases) {  // model/weights.cpp's layout: one F32 row per expert, as mats
        l.gate_inp_b = add(GgmlType::F32, c.n_expert, 1);
        l.gate_exps_b = add(GgmlType::F32, c.n_ff, 1, c.n_expert);
        l.up_exps_b = add(GgmlType::F32, c.n_ff, 1, c.n_expert);
        l.down_exps_b = add(GgmlType::F32, c.n_embd, 1, c.n_expert);
      }
    } else {
      l.gate = add(type, c.n_embd, c.n_ff);
      l.up = add(type, c.n_embd, c.n_ff);
      l.down = add(type, c.n_ff, c.n_embd);
    }
    l.end = m.bytes.size();
    m.w.layers.push_back(l);
  }
  m.w.output_norm = norm(c.n_embd);
  m.w.output = add(type, c.n_embd, c.n_vocab);
  return m;
}

}  // namespace gpunvme::llm::test
