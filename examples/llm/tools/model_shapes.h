// Model shapes the generator (make_model.cpp, and the emulator's emu:gen namespace: emu_gen.h) writes at
// full size with random but valid weights: the benchmark's dense and MoE models (issues #13, #33) in the
// layout of their architecture, and tiny ones for the tests. A shape plus a weight type gives the whole
// GGUF layout (metadata and tensors).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/gguf/gguf_builder.h"

namespace gpunvme::llm::gen {

// The tensor layout and metadata keys a shape is written in: llama.cpp's architecture of that name.
enum class Arch : uint8_t {
  kLlama,     // "llama": dense, or Mixtral-style experts
  kQwen3Moe,  // "qwen3moe": per-head Q/K norms, every layer routed, no dense FFN tensors
  kGptOss,    // "gpt-oss": biases, attention sinks, sliding-window layers, YaRN, routed with biased experts
  kGemma3,    // "gemma3": dense, per-head Q/K norms, post-norms, windowed layers (every 6th global), tied output
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
  // gpt-oss and gemma3: attention.sliding_window (llama.cpp windows every other gpt-oss layer, the first
  // included, and 5 of every 6 gemma3 layers); gpt-oss: the YaRN scaling of its RoPE (config.json's
  // rope_scaling: factor, original_max_position_embeddings).
  uint32_t swa_window = 0;
  float yarn_factor = 0;
  uint32_t yarn_orig_ctx = 0;

  uint32_t head_size() const { return head_dim ? head_dim : hidden / heads; }
};

// llama3-70b (80 layers, 8192, 64/8 heads, 28672 FFN, 128256 vocab) and mixtral-8x7b (32 layers, 4096,
// 32/8, 8 experts of 14336, top 2, 32000 vocab) in the llama layout; qwen3-30b-a3b (48 layers, 2048,
// 32/4 heads of 128, 128 experts of 768, top 8, 151936 vocab) and qwen3-235b-a22b (94 layers, 4096, 64/4
// heads of 128, 128 experts of 1536, top 8) in the qwen3moe layout, as Qwen's config.json and
// llama.cpp's converter give them; qwen3-30b-a3b-llama, the llama-layout stand-in the published MoE
// numbers before issue 33 were measured on (docs/performance.md: 64-wide heads, no Q/K norms); tiny
// (2 layers, 256), tiny-moe (tiny, 8 experts, top 2), tiny-qwen3moe (2 layers, 256, 4/2 heads of 128,
// 8 experts of 256, top 2); gpt-oss-20b (24 layers, 2880, 64/8 heads of 64, 32 experts of 2880, top 4,
// 201088 vocab, window 128) and gpt-oss-120b (36 layers, 128 experts) in the gpt-oss layout, as OpenAI's
// config.json and llama.cpp's converter give them; tiny-gpt-oss (2 layers: one windowed, one global;
// 320 wide, so rows are not whole 256-element blocks as 2880 is not; 8/2 heads of 64, 8 experts of 320,
// top 4, window 8); llama3-8b (32 layers, 4096, 32/8 heads, 14336 FFN, 128256 vocab) in the llama layout,
// as Meta's config.json and llama.cpp's converter give it; gemma3-270m (18 layers, 640, 4/1 heads of
// 256, 2048 FFN, 262144 vocab, window 512) in the gemma3 layout, the keys and tensors of the published
// Gemma 3 270M GGUF; tiny-gemma3 (6 layers, so one is global; 320 wide; 4/1 heads of 64, 512 FFN,
// window 8). Throws std::invalid_argument naming the known shapes.
Shape shape_named(const std::string& name);
// The weight type by its name (q4_k, q6_k, q8_0, mxfp4; upper case too) as a ggml type id; throws
// std::invalid_argument naming them. q4_k, q6_k and q8_0: every matrix in that type (a matrix whose rows
// are not whole 256-element blocks: llama.cpp's quantizer's fallback, model_layout). mxfp4: the mix
// gpt-oss is published in (ggml-org's GGUFs): MXFP4 experts, every other matrix Q8_0 (weight_types below).
uint32_t type_named(const std::string& name);
// general.name of a generated model, e.g. "qwen3-235b-a22b-q4_k", "gpt-oss-120b-mxfp4".
std::string model_name(const Shape& s, uint32_t type);
std::string shape_names();  // "llama3-70b, mixtral-8x7b, ..."

// The types of a model's matrices for a weight type: the experts' stacks and the others (embedding,
// attention, output). Norms, biases, sinks and the MoE router are F32 whatever the type.
struct MatrixTypes {
  uint32_t experts = 0, others = 0;
};
MatrixTypes matrix_types(uint32_t type);

// What a tensor's random values look like (generated_model.cpp makes blocks for them).
enum class Fill : uint8_t {
  kWeight,     // a matrix: values of about 1/sqrt(input size), centred
  kEmbedding,  // token embeddings: values of about 1
  kNorm,       // F32 norm weights: 1 +- 0.1
  kPostNorm,   // F32 gemma3 post_ffw_norm: 8 +- 0.8 (model_layout says why)
  kRouter,     // F32 MoE router: values of about 1, so that tokens pick different experts
  kBias,       // F32 biases and attention sinks: values of about 0.1, centred
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
  // In file order. Per layer: the dense tensors first, then the experts; gpt-oss's each followed by its
  // bias (as converted gpt-oss files interleave them: the dense part of a layer is several pieces).
  std::vector<TensorPlan> tensors;
};

// `type`: a type_named id (matrix_types gives the matrices' types). A matrix whose rows are not whole
// blocks of its type takes the type llama.cpp's quantizer falls back to (llama-quant.cpp: Q4_K to Q5_0,
// Q6_K to Q8_0), as in a Q4_K_M file of Gemma 3, whose rows of 640 are not whole 256-element blocks.
// Throws std::invalid_argument for a type the shape cannot take, naming the fix: mxfp4 without experts;
// gpt-oss in anything but mxfp4 (as it is published).
// `vocab`: tokenizer.* entries (vocab_copy.h) written in place of tokenizer.ggml.model = none (no vocabulary).
ModelLayout model_layout(const Shape& s, uint32_t type, const std::string& name,
                         const std::vector<std::function<void(gguf::builder::Bytes&)>>& vocab = {});

}  // namespace gpunvme::llm::gen
