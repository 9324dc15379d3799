// How well a one-token-lag prefetch does (issue #13): at each MoE layer, were "the experts the previous
// token chose here" the ones this token chose? Measured from the routed ids of every token, whether or
// not the prefetch runs (GpuExpertFetcher::prefetch, counted there as reads, hits and waste). Also the
// prefetch's report lines, written once for the engine's summary and JSON and bench/llm_tokens.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/stream/expert_fetcher.h"

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

// Which prefetch ran: the one-token lag, pre-gating (its predicted experts read per layer), or none.
struct PrefetchKind {
  bool lag = false;
  uint32_t pregate = 0;
  uint32_t first = 0;  // pre-gating: experts of the next pass's first fetched layer read at the last
  bool on() const { return lag || pregate > 0; }
  const char* name() const { return lag ? "lag" : pregate ? "pregate" : "off"; }
};

// One summary line: which prefetch ran, its reads, hits and waste, the post-routing faults
// (`fetch`: the demand fetches) and the stall per layer (total, mean per fetch, worst layer).
std::string prefetch_summary(PrefetchKind kind, const stream::PrefetchMetrics& p, const stream::FetcherMetrics& fetch);
// The same as JSON members (no braces): "prefetch":..,"prefetch_kind":..,"pregate_experts":..,
// "prefetch_reads":.., ..,"stall_seconds_per_layer":[..].
std::string prefetch_json(PrefetchKind kind, const stream::PrefetchMetrics& p, const stream::FetcherMetrics& fetch);

}  // namespace gpunvme::llm
