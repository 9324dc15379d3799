// Layer streamer: N slots (default 2) in DMA memory (GPU mapped when a GPU is present), a PRP
// table per slot and a command plan per (layer, slot), all built in the constructor. On the hot
// path begin() hands a ready plan to the submitter and wait() waits for its tickets: no address
// math, no allocation, no staging copy (the controller's DMA lands in the slot).
//
// Slot life cycle, enforced (a violation throws kInvalidArgument, it never overwrites data):
//   free --begin(layer, slot)--> loading --wait(slot)--> held --release(slot)--> free
// A held slot is the consumer's: nothing is read into it until the consumer releases it.
//
// Double buffering:
//   s.begin(0, 0);
//   for (l = 0; l < L; ++l) {
//     if (l + 1 < L) s.begin(l + 1, (l + 1) % 2);   // the next layer streams ...
//     auto v = s.wait(l % 2);                       // ... while this one is computed on
//     compute(v);
//     s.release(l % 2);
//   }
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "host/controller.h"
#include "host/dma_memory.h"
#include "runtime/plan/command_plan.h"
#include "runtime/plan/prp_table.h"
#include "runtime/stream/submitter.h"

namespace gpunvme::stream {

struct StreamerOptions {
  uint32_t slots = 2;
  uint32_t nsid = 1;
  uint32_t max_command_bytes = 0;  // further cap below MDTS; 0: MDTS alone
  uint64_t align = 0;              // piece alignment in a slot; 0: the controller page
  bool gpu_mapped = true;          // map slots into the GPU when one is present
  host::HugePages hugepages = host::HugePages::kAuto;
};

struct SlotView {
  uint32_t slot = 0;
  uint32_t layer = 0;
  const uint8_t* host = nullptr;   // CPU view of the slot
  const void* device = nullptr;    // GPU view, or nullptr
  uint64_t bytes = 0;              // bytes of the slot this layer used
  const plan::CommandPlan* plan = nullptr;  // pieces: where each extent's bytes start
};

struct LayerTiming {
  uint32_t layer = 0;
  uint64_t bytes = 0;
  double io_ms = 0;    // begin() until wait() saw the last completion
  double wait_ms = 0;  // time the consumer spent inside wait()
};

struct StreamStats {
  uint64_t layers = 0;
  uint64_t bytes = 0;       // bytes read (whole blocks)
  double io_seconds = 0;    // sum of per-layer I/O times
  double wait_seconds = 0;  // sum of time spent waiting
  double elapsed_seconds = 0;  // first begin() to the last wait()
  std::vector<LayerTiming> per_layer;  // in wait() order
  double gb_per_s() const { return elapsed_seconds > 0 ? bytes / elapsed_seconds / 1e9 : 0; }
};

class LayerStreamer {
 public:
  // layers[i]: the extents of layer i (plan::layer_extents(map) or a synthetic layout).
  LayerStreamer(host::Controller& controller, Submitter& submitter, std::vector<std::vector<model::Extent>> layers,
                const StreamerOptions& options = {});
  // Waits for reads still landing in a slot (they must not outlive the slot memory or the plans).
  ~LayerStreamer();
  LayerStreamer(const LayerStreamer&) = delete;
  LayerStreamer& operator=(const LayerStreamer&) = delete;

  uint32_t layer_count() const { return uint32_t(layers_.size()); }
  uint32_t slot_count() const { return uint32_t(slots_.size()); }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint32_t lba_bytes() const { return geometry_.lba_bytes; }
  const plan::CommandPlan& plan(uint32_t layer, uint32_t slot) const;
  const host::DmaBuffer& slot_buffer(uint32_t slot) const;
  uint64_t prp_bytes() const;       // PRP list memory of all slots
  uint64_t template_bytes() const;  // command templates of all plans

  void begin(uint32_t layer, uint32_t slot);
  bool ready(uint32_t slot);  // non-blocking: the slot's reads completed
  SlotView wait(uint32_t slot);
  void release(uint32_t slot);

  const StreamStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  enum class State { kFree, kLoading, kHeld };
  struct Slot {
    host::DmaBuffer buffer;
    plan::PrpTable table;
    State state = State::kFree;
    uint32_t layer = 0;
    uint64_t ticket = 0;
    std::chrono::steady_clock::time_point began;
  };
  Slot& slot_at(uint32_t slot, const char* what);

  host::Controller& controller_;
  Submitter& submitter_;
  std::vector<std::vector<model::Extent>> layers_;
  StreamerOptions options_;
  plan::PlanGeometry geometry_;
  uint64_t slot_bytes_ = 0;
  std::vector<Slot> slots_;
  std::vector<plan::CommandPlan> plans_;  // [layer * slots + slot]
  StreamStats stats_;
  bool started_ = false;
  std::chrono::steady_clock::time_point first_begin_;
};

// Per-command block limit for a namespace: MDTS, NLB, and an optional byte cap.
uint32_t command_block_limit(const host::Controller& controller, uint32_t nsid, uint64_t max_command_bytes);

}  // namespace gpunvme::stream
