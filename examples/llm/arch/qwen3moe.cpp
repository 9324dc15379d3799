// qwen3moe (llama.cpp's src/models/qwen3moe.cpp): qwen3's attention, and every layer routed
// (expert_count and expert_used_count required), softmax over all the router's logits, the top
// expert_used_count weights renormalised to sum 1 (build_moe_ffn with norm_w; no weight scale: it does
// not read expert_weights_scale), the experts expert_feed_forward_length wide, or feed_forward_length /
// expert_used_count where the key is absent.
#include "examples/llm/arch/arch.h"

namespace gpunvme::llm {
namespace {

void qwen3moe(ModelConfig& c, const KeyReader& r) {
  c.rope = RopeLayout::kNeox;
  c.qk_norm = true;
  c.n_expert = r.u32("expert_count");
  c.n_expert_used = r.u32("expert_used_count");
  const std::string key = r.prefix + "expert_feed_forward_length";
  if (r.has("expert_feed_forward_length")) {
    c.n_ff = r.u32("expert_feed_forward_length");
    c.n_ff_from = key + " = " + std::to_string(c.n_ff);
  } else {
    c.n_ff_from = "no " + key + ", so " + r.prefix + "feed_forward_length / expert_used_count = " +
                  std::to_string(c.n_ff) + " / " + std::to_string(c.n_expert_used) + ", as llama.cpp takes it";
    c.n_ff /= c.n_expert_used;
  }
}

}  // namespace

extern const ArchRules kQwen3MoeRules{"qwen3moe", Arch::kQwen3Moe, "qwen3moe", qwen3moe};

}  // namespace gpunvme::llm
