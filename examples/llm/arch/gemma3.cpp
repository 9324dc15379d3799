// gemma3 (llama.cpp's src/models/gemma3.cpp): NEOX RoPE, local layers at base 10000 with a window and
// every 6th layer global, embeddings scaled by sqrt(n_embd), GeGLU, Q/K norms and post-norms. Its graph
// takes a rope.dimension_count below the head size (partial rotary).
#include "examples/llm/arch/arch.h"

#include <cmath>

namespace gpunvme::llm {
namespace {

void gemma3(ModelConfig& c, const KeyReader& r) {
  c.rope = RopeLayout::kNeox;
  c.rope_base_swa = 10000.0f;
  c.swa_window = r.u32("attention.sliding_window");
  c.swa_period = 6;
  c.embd_scale = std::sqrt(float(c.n_embd));
  c.act = FfnAct::kGelu;
  c.qk_norm = c.post_norms = true;
}

}  // namespace

extern const ArchRules kGemma3Rules{"gemma3", Arch::kGemma3, "gemma3", gemma3, true};

}  // namespace gpunvme::llm
