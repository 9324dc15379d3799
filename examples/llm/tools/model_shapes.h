// Model shapes the generator (make_model.cpp, and the emulator's emu:gen namespace: emu_gen.h) writes at
// full size with random but valid weights: the benchmark's dense and MoE models (issues #13, #33) in the
// layout of their architecture, and tiny ones for the tests. A shape plus a weight type gives the whole
// GGUF layout (metadata and tensors).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/gguf/gguf_builder.h"

namespace gpunvme::llm::gen {

// The tensor layout and metadata keys a shape is written in: llama.cpp's architecture of that name.
enum class Arch : uint8_t {
  kLlama,     // "llama": dense, or Mixtral-style experts
  kQwen3Moe,  // "qwen3moe": per-head Q/K norms, every layer routed, no dense FFN tensors
};

struct Shape {
  std::string name;
  uint32_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, ctx = 0;
  uint32_t experts = 0, experts_used = 0;  // 0: dense; MoE: ffn is each expert's
  float rope_base = 10000.0f;
  Arch arch = Arch::kLlama;
  uint32_t head_dim = 0;     // 0: hidden / heads (llama); qwen3moe's heads are wider than hidden / heads
  uint32_t dense_ffn = 0;    // qwen3moe: feed_forward_length as the real model's GGUF says (no tensor of it)
  float rms_eps = 1e-5f;

  uint32_t head_size() const { return head_dim ? head_dim : hidden / heads; }
};

// llama3-70b (80 layers, 8192, 64/8 heads, 28672 FFN, 128256 vocab) and mixtral-8x7b (32 layers, 4096,
// 32/8, 8 experts of 14336, top 2, 32000 vocab) in the llama layout; qwen3-30b-a3b (48 layers, 2048,
// 32/4 heads of 128, 128 experts of 768, top 8, 151936 vocab) and qwen3-235b-a22b (94 layers, 4096, 64/4
// heads of 128, 128 experts of 1536, top 8) in the qwen3moe layout, as Qwen's config.json and
// llama.cpp's converter give them; qwen3-30b-a3b-llama, the llama-layout stand-in the published MoE
// numbers before issue 33 were measured on (docs/performance.md: 64-wide heads, no Q/K norms); tiny
// (2 layers, 256), tiny-moe (tiny, 8 experts, top 2), tiny-qwen3moe (2 layers, 256, 4/2 heads of 128,
// 8 experts of 256, top 2). gpt-oss-20b and gpt-oss-120b come here once the MXFP4 type exists (issue 33).
// Throws std::invalid_argument naming the known shapes.
Shape shape_named(const std::string& name);
std::string shape_names();
// The matrices' type by its name (q4_k, q6_k; upper case too); throws std::invalid_argument naming both.
uint32_t type_named(const std::string& name);
// general.name of a generated model, e.g. "qwen3-235b-a22b-q4_k".
std::string model_name(const Shape& s, uint32_t type);  // "llama3-70b, mixtral-8x7b, ..."

// What a tensor's random values look like (generated_model.cpp makes blocks for them).
enum class Fill : uint8_t {
  kWeight,     // a matrix: values of about 1/sqrt(input size), centred
  kEmbedding,  // token embeddings: values of about 1
  kNorm,       // F32 norm weights: 1 +- 0.1
  kRouter,     // F32 MoE router: values of about 1, so that tokens pick different experts
};

struct TensorPlan {
  std::string name;
  std::vector<uint64_t> ne;  // ggml order: ne[0] = elements per row
  uint32_t type = 0;         // ggml type id
  Fill fill = Fill::kWeight;
  uint64_t bytes = 0;
};

struct ModelLayout {
  gguf::builder::Spec spec;        // metadata and tensor infos (data = false: bytes come from the generator)
  std::vector<TensorPlan> tensors;  // in file order; per layer: dense tensors first, then the experts
};

// `type`: the matrices' ggml type (Q4_K or Q6_K); norms and the router are F32.
ModelLayout model_layout(const Shape& s, uint32_t type, const std::string& name);

}  // namespace gpunvme::llm::gen
