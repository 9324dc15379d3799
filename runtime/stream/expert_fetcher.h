// Expert fetcher (MoE): given the experts a router picked for one layer, reads their slices (all
// projections, or only `down`) into a scratchpad in DMA memory and signals readiness per expert.
//
// Two scratchpad modes:
//   * no cache (cache_bytes == 0): every fetch packs the selected experts back to back from offset
//     0 (cumulative offsets, each expert's first part page aligned); the previous fetch's data is
//     overwritten by the next fetch.
//   * LRU cache (cache_bytes > 0): the scratchpad is cut into cache_bytes / expert_slot_bytes()
//     fixed slots; a resident expert is a hit (no I/O), a missing one is a fault that evicts the
//     least recently used expert not selected by the current fetch (expert_cache_policy.h, the
//     same policy the GPU fetcher runs). The budget must hold at least max_experts_per_fetch experts.
// Validation, packing and sizing: expert_layout.h (shared with the GPU fetcher). A failed read
// (or one never issued) leaves the cache: an expert is never a hit unless its read succeeded.
// Calling fetch() ends the previous token: it waits for that fetch's reads, and its experts may be
// evicted or overwritten from then on. Results refer to the scratchpad until the next fetch().
//
// Readiness: fetch() issues one submitter ticket per faulted expert and returns at once;
// ready(i) / wait(i) / wait_all() report per expert (hits are ready immediately).
#pragma once
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "host/controller.h"
#include "host/dma_memory.h"
#include "runtime/plan/command_plan.h"
#include "runtime/plan/prp_table.h"
#include "runtime/stream/expert_cache_policy.h"
#include "runtime/stream/expert_layout.h"
#include "runtime/stream/submitter.h"

namespace gpunvme::stream {

struct FetcherOptions {
  uint32_t nsid = 1;
  uint32_t max_experts_per_fetch = 8;  // top-k (distinct experts per fetch)
  uint64_t cache_bytes = 0;            // 0: no cache
  // A cache of at least this many experts whatever cache_bytes holds (the engine's pre-gating prefetch
  // needs two fetches' worth with a RAM budget of 0).
  uint32_t min_cache_experts = 0;
  uint32_t max_command_bytes = 0;      // further cap below MDTS
  bool gpu_mapped = true;
  uint32_t warmup_tokens = 0;  // steady-state metrics start after this many fetches (0: once the cache is full)
  // GPU fetcher: about this many bytes of a fetch's reads in flight at once (rounded up to one command
  // per queue), issued in the order the consumer reads them; 0: as many as the queues take. All reads at
  // once end together (a drive, or the emulator, shares its bandwidth among them): the consumer's first
  // expert would wait for nearly the whole fetch. A window of a few times the drive's bandwidth-delay
  // product keeps the drive busy and lets the reads end in order (gpu_expert_fetcher.h).
  uint64_t read_window_bytes = 8ull << 20;
  // GPU fetcher with concurrent prefetches: once a fetch of the layer a prefetch predicted is placed,
  // the prefetch's experts it did not select get no more of their reads (each read left becomes one
  // block; the slot, never completed, is forgotten at the next prefetch's placement), so a wrong
  // prediction costs the drive only its reads already issued. Off, the cache stays the CPU fetcher's
  // (which reads every prefetch in full) expert for expert.
  bool cut_wrong_prefetches = false;
};

struct FetchedPart {
  model::Projection proj;
  uint64_t offset = 0;  // scratchpad offset of the part's first byte
  uint64_t bytes = 0;
};

struct FetchedExpert {
  uint32_t expert = 0;
  uint64_t offset = 0;  // scratchpad offset of its first block (cache slot or packed position)
  uint64_t bytes = 0;   // scratchpad bytes it spans
  bool hit = false;     // already resident (cache)
  std::vector<FetchedPart> parts;
};

struct FetcherMetrics {
  uint64_t tokens = 0;            // fetch() calls
  uint64_t requested = 0;         // distinct experts requested, all tokens
  uint64_t faults = 0;            // experts read from the device
  uint64_t hits = 0;
  uint64_t bytes_read = 0;
  uint32_t last_faults = 0;       // faulted experts of the latest token
  uint64_t steady_tokens = 0;     // tokens counted after warm-up
  uint64_t steady_faults = 0;
  double faults_per_token() const { return tokens ? double(faults) / tokens : 0; }
  double steady_faults_per_token() const { return steady_tokens ? double(steady_faults) / steady_tokens : 0; }
  double hit_rate() const { return requested ? double(hits) / requested : 0; }
};

// What GpuExpertFetcher::prefetch() did, and the GPU fetches' stalls (gpu_expert_fetcher.h).
struct PrefetchMetrics {
  uint64_t prefetches = 0;    // prefetch() calls
  uint64_t reads = 0;         // experts the prefetches read (the others were resident already)
  uint64_t bytes_read = 0;    // bytes the drive moved for them (less cut_bytes)
  uint64_t hits = 0;          // of the experts read, those the next fetch of that layer selected
  uint64_t wasted = 0;        // the others: read for nothing
  uint64_t wasted_bytes = 0;  // bytes the drive moved for those (less cut_bytes)
  uint64_t cut = 0;           // wasted ones whose reads were cut short (FetcherOptions::cut_wrong_prefetches)
  uint64_t cut_bytes = 0;     // bytes the cut spared the drive: its reads issued as one block
  uint64_t unsettled = 0;     // reads of the last prefetch, which no fetch has followed yet (with no failed read, hits + wasted + unsettled = reads)
  // [layer]: GPU time from the kernel before each fetch (routing done) to its experts' reads done,
  // including any wait for a prefetch still reading; summed over all fetches.
  std::vector<double> stall_seconds;
  // [layer]: the part of the stall spent reading: from the reads written (the place kernel's end) to
  // the last one done. The rest is the wait for the previous fetch's reads, placement and launches.
  std::vector<double> read_seconds;
  // [layer]: from the reads done to the consumer's kernels done (GpuExpertFetcher::consumed()).
  std::vector<double> tail_seconds;
};

class ExpertFetcher {
 public:
  ExpertFetcher(host::Controller& controller, Submitter& submitter, ExpertCatalog catalog,
                const FetcherOptions& options = {});
  ~ExpertFetcher();

  // Issues the reads of `experts` (duplicates collapse) of `layer`; returns at once.
  const std::vector<FetchedExpert>& fetch(uint32_t layer, std::span<const uint32_t> experts);
  const std::vector<FetchedExpert>& result() const { return result_; }
  bool ready(size_t i);
  void wait(size_t i);
  void wait_all();

  const host::DmaBuffer& scratchpad() const { return scratch_; }
  uint64_t expert_slot_bytes() const { return expert_bytes_; }
  uint32_t cache_capacity() const { return capacity_; }  // experts; 0 without cache
  const FetcherMetrics& metrics() const { return metrics_; }
  // Retries, aborts, resets behind the fetches (the submitter's count, issue #15).
  host::RecoveryStats recovery() const { return submitter_.recovery(); }
  std::vector<uint32_t> resident_per_layer() const;
  bool resident(uint32_t layer, uint32_t expert) const;
  const ExpertCatalog& catalog() const { return catalog_; }

 private:
  uint64_t key(uint32_t layer, uint32_t expert) const { return uint64_t(layer) * catalog_.n_experts + expert; }
  // fetch(), phase by phase.
  std::vector<uint32_t> select(uint32_t layer, std::span<const uint32_t> experts) const;
  std::vector<CachePlacement> place(std::span<const uint64_t> keys) const;
  void build_results(uint32_t layer, std::span<const uint32_t> sel, std::span<const CachePlacement> placement);
  void issue_reads(std::span<const uint64_t> keys, std::span<const CachePlacement> placement);
  void count(size_t selected, uint32_t faults, bool steady);

  host::Controller& controller_;
  Submitter& submitter_;
  ExpertCatalog catalog_;
  FetcherOptions options_;
  plan::PlanGeometry geometry_;
  uint64_t page_ = 4096;
  ExpertLayout layout_;
  uint64_t expert_bytes_ = 0;  // scratchpad bytes of the largest expert, page rounded
  uint32_t capacity_ = 0;
  host::DmaBuffer scratch_;
  plan::PrpTable table_;
  ExpertCachePolicy cache_;  // LRU slots (capacity_ > 0)
  // Current fetch.
  std::vector<FetchedExpert> result_;
  std::vector<uint64_t> keys_;            // per result entry
  std::vector<plan::CommandPlan> plans_;  // per result entry (empty for hits)
  std::vector<uint64_t> tickets_;         // per result entry (0: ready)
  FetcherMetrics metrics_;
};

}  // namespace gpunvme::stream
