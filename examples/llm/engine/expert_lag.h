// How well a one-token-lag prefetch would do (issue #13): at each MoE layer, would "the experts the
// previous token chose here" have been the ones this token chose? Measured from the routed ids of every
// token; no read is issued for it (the prefetch itself is not implemented: the GPU expert fetcher runs
// one fetch at a time on the compute stream, so an early fetch could not overlap anything yet).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace gpunvme::llm {

struct LagCounts {
  uint64_t tokens = 0;        // tokens compared with their predecessor
  uint64_t routed = 0;        // distinct experts routed at the compared layers
  uint64_t predicted_hits = 0;  // of them, chosen by the previous token at the same layer
  uint64_t wasted = 0;        // experts the previous token chose that this one did not
  uint64_t wasted_bytes = 0;  // their bytes: what a prefetch would have read for nothing
  double hit_rate() const { return routed ? double(predicted_hits) / double(routed) : 0; }
};

class ExpertLag {
 public:
  // k: experts per token; expert_bytes[layer]: one expert's bytes (0: a layer not counted).
  ExpertLag(uint32_t k, std::vector<uint64_t> expert_bytes);
  // One token's routed ids: ids[layer * k .. + k) for every layer.
  void token(std::span<const uint32_t> ids);
  const LagCounts& counts() const { return c_; }

 private:
  uint32_t k_;
  std::vector<uint64_t> bytes_;
  std::vector<std::vector<uint32_t>> prev_;  // [layer] distinct ids of the previous token, sorted
  LagCounts c_;
};

}  // namespace gpunvme::llm
