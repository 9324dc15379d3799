// llama.cpp tensor naming conventions the LBA map groups by (llama.cpp src/llama-arch.cpp):
//   blk.N.<rest>                      layer N
//   blk.N.ffn_{gate,up,down}_exps.weight   MoE experts stacked: ne = [ne0, ne1, n_expert]
//   blk.N.ffn_gate_up_exps.weight          (fused gate+up, newer converters), same stacking
//   blk.N.ffn_{gate,up,down}.M.weight      older per-expert tensors (e.g. early Mixtral GGUFs)
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace gpunvme::model {

enum class Projection : uint8_t { kGate, kUp, kDown, kGateUp };
const char* projection_name(Projection p);

// Layer index of "blk.N.*", else nullopt.
std::optional<uint32_t> layer_of(std::string_view name);

struct ExpertName {
  uint32_t layer;
  Projection proj;
  bool stacked;     // *_exps.weight: all experts in one tensor
  uint32_t expert;  // per-expert tensors only
};
std::optional<ExpertName> parse_expert_name(std::string_view name);

}  // namespace gpunvme::model
