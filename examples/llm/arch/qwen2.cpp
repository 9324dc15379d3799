// qwen2 (llama.cpp's src/models/qwen2.cpp): NEOX RoPE over whole heads (its graph asserts n_rot equal
// to the head size), Q, K and V biases (model/weights.cpp maps them).
#include "examples/llm/arch/arch.h"

namespace gpunvme::llm {

extern const ArchRules kQwen2Rules{"qwen2", Arch::kQwen2, "qwen2",
                                   [](ModelConfig& c, const KeyReader&) { c.rope = RopeLayout::kNeox; }};

}  // namespace gpunvme::llm
