// qwen3 (llama.cpp's src/models/qwen3.cpp): NEOX RoPE with Q and K RMS-normed per head before it; no
// experts (its graph has none, whatever expert_count says).
#include "examples/llm/arch/arch.h"

namespace gpunvme::llm {
namespace {

void qwen3(ModelConfig& c, const KeyReader&) {
  c.rope = RopeLayout::kNeox;
  c.qk_norm = true;
  c.n_expert = c.n_expert_used = 0;
}

}  // namespace

extern const ArchRules kQwen3Rules{"qwen3", Arch::kQwen3, "qwen3", qwen3};

}  // namespace gpunvme::llm
