// llama (llama.cpp's src/models/llama.cpp): dense, or Mixtral-style routed experts where expert_count
// is present (softmax over all the router's logits, top expert_used_count renormalised); NORM RoPE
// over whole heads.
#include "examples/llm/arch/arch.h"

namespace gpunvme::llm {

extern const ArchRules kLlamaRules{"llama", Arch::kLlama, "llama (dense and Mixtral-style MoE)",
                                   [](ModelConfig& c, const KeyReader&) { c.rope = RopeLayout::kNorm; }};

}  // namespace gpunvme::llm
