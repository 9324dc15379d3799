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
//
// GPU-ordered streaming (a submitter with the StreamOrdered capability, e.g. GpuSubmitter; CUDA
// builds): the host only enqueues, the GPU issues the
// reads and the compute stream waits on them; nothing blocks the host until sync().
//   s.begin(0, 0, io);
//   for (l = 0; l < L; ++l) {
//     if (l + 1 < L) s.begin(l + 1, (l + 1) % 2, io);  // a kernel on `io` reads the next layer ...
//     auto v = s.wait(l % 2, compute);                  // ... `compute` waits only for this one
//     my_kernel<<<..., compute>>>(v.device, v.status);
//     s.release(l % 2, compute);                        // the slot is refilled after my_kernel
//   }
//   s.sync();                                           // errors and stats
// A begin() into a slot waits (on `io`) for that slot's last release(slot, compute): data a kernel
// is still reading is never overwritten.
#pragma once
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <vector>

#include "host/controller.h"
#include "host/dma_memory.h"
#include "host/recovery.h"
#include "runtime/plan/command_plan.h"
#include "runtime/model/stripe.h"
#include "runtime/plan/prp_table.h"
#include "runtime/stream/cuda_stream.h"
#include "runtime/stream/striped_submitter.h"
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
  // GPU-ordered loads: device pointer to the reads' state word (stream::ticket_state: 1 = every
  // read succeeded, 2 = failed), for kernels that refuse to compute on bad data; else nullptr.
  const uint32_t* status = nullptr;
};

struct LayerTiming {
  uint32_t layer = 0;
  uint64_t bytes = 0;
  double io_ms = 0;    // begin() until wait() saw the last completion
  double wait_ms = 0;  // time the consumer spent inside wait() (GPU-ordered: time the compute stream stalled)
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

// A member of a striped set for the striped streamer: its controller and submitter (its own queues),
// and for GPU-ordered loads of members 1..N-1 a CUDA stream of its own (striped_submitter.h).
struct StripedMember {
  host::Controller* controller = nullptr;
  Submitter* submitter = nullptr;
  cuda_stream_t io = nullptr;
};

class LayerStreamer {
 public:
  // layers[i]: the extents of layer i (plan::layer_extents(map) or a synthetic layout).
  LayerStreamer(host::Controller& controller, Submitter& submitter, std::vector<std::vector<model::Extent>> layers,
                const StreamerOptions& options = {});
  // A striped set (model/stripe.h): `layers` holds extents of the set's logical volume (an LbaMap of
  // the model found there); each is split per member, and every member's controller reads its part
  // into the same slot at the offset where it would land from one drive, so a slot's bytes, its
  // plan's pieces and locate() are those of the same model on one drive. A begin() issues every
  // member's reads at once (each through its own submitter); wait() waits for all of them. Every
  // slot is mapped for every member's DMA. plan(layer, slot).commands holds member 0's commands,
  // then member 1's, ... (read_bytes: all of them).
  LayerStreamer(std::vector<StripedMember> members, const model::StripeGeometry& stripe,
                std::vector<std::vector<model::Extent>> layers, const StreamerOptions& options = {});
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

  enum class SlotState { kFree, kLoading, kHeld };
  SlotState slot_state(uint32_t slot) const { return slots_.at(slot).state; }  // for the C API's checks

  void begin(uint32_t layer, uint32_t slot);
  bool ready(uint32_t slot);  // non-blocking: the slot's reads completed
  SlotView wait(uint32_t slot);
  void release(uint32_t slot);

  // GPU-ordered (needs submitter.stream_ordered(); kUnsupported otherwise). Same slot life cycle as above.
  void begin(uint32_t layer, uint32_t slot, cuda_stream_t io);  // a kernel on `io` issues the reads
  SlotView wait(uint32_t slot, cuda_stream_t compute);          // `compute` waits for them; returns at once
  void release(uint32_t slot, cuda_stream_t compute);           // refill only after `compute`'s work so far
  // Blocks (bounded) until every GPU-ordered read ended and the compute stream passed every wait;
  // throws the first failure since the last sync() (a failed load's consumer sees
  // ticket_state::kFailed in SlotView::status at once); fills stats(). A failed load does not stop
  // the streamer: begin() and wait() of later layers go on. Call before reading stats().
  void sync();
  // Non-blocking: retires the GPU-ordered loads whose consumers got past them and throws the first
  // failure since the last sync(). For a consumer that must stop at the token it computed on a failed
  // load (the engine, after each token's logits), not only at sync().
  void throw_if_failed();

  const StreamStats& stats() const { return stats_; }
  // Retries, aborts, resets behind the streamed reads (the submitter's count, issue #15).
  host::RecoveryStats recovery() const { return submitter_.recovery(); }
  void reset_stats() { stats_ = {}; }

 private:
  using State = SlotState;
  struct Slot {
    host::DmaBuffer buffer;
    plan::PrpTable table;
    std::vector<host::DmaMapping> member_maps;     // striped: the buffer for members 1..N-1
    std::vector<plan::PrpTable> member_tables;     // striped: member m's table is member_tables[m - 1]
    State state = State::kFree;
    uint32_t layer = 0;
    uint64_t ticket = 0;
    bool gpu_ordered = false;        // the current load was begun on a stream
    void* released = nullptr;        // cudaEvent_t recorded by release(slot, compute)
    bool release_pending = false;    // `released` was recorded and not yet waited for by a begin
    bool landed = false;             // sync() saw this GPU-ordered load end (its ticket is retired)
    const uint32_t* status = nullptr;  // device state word of the current GPU-ordered load
    std::chrono::steady_clock::time_point began;
  };
  // A GPU-ordered load until its timings were collected (sync / retire_gpu_loads).
  struct GpuLoad {
    uint32_t layer = 0;
    uint32_t slot = 0;
    uint64_t ticket = 0;
    uint64_t bytes = 0;
    void* stall_begin = nullptr;  // cudaEvent_t on compute before it waited for the ticket, or nullptr
    void* stall_end = nullptr;    // ... after
    bool ticket_retired = false;
  };
  Slot& slot_at(uint32_t slot, const char* what);
  void begin_checks(Slot& s, uint32_t layer, uint32_t slot);
  void start_clock();
  StreamOrdered* stream_ordered(const char* what);  // the submitter's capability; throws kUnsupported
  bool retire_gpu_load(GpuLoad& g, bool block);  // true once its stats are in
  void retire_gpu_loads(bool block);
  void keep_failure(std::exception_ptr e);  // the first one, for sync()
  void* take_event();

  LayerStreamer(std::unique_ptr<StripedSubmitter> striped, std::vector<StripedMember> members,
                const model::StripeGeometry& stripe, std::vector<std::vector<model::Extent>> layers,
                const StreamerOptions& options);
  void allocate_slots(host::Controller& controller, uint64_t align);
  void build_striped_plans(const std::vector<StripedMember>& members, const model::StripeGeometry& stripe, uint64_t align);

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
  std::vector<GpuLoad> gpu_loads_;   // in begin order
  std::vector<void*> spare_events_;  // timing events for stalls, reused
  std::vector<void*> all_events_;    // every event this streamer created (destroyed with it)
  std::exception_ptr first_failure_; // a GPU-ordered load's error, until sync() throws it
  std::unique_ptr<StripedSubmitter> striped_;  // a striped set's: submitter_ refers to it
};

// Per-command block limit for a namespace: MDTS, NLB, and an optional byte cap.
uint32_t command_block_limit(const host::Controller& controller, uint32_t nsid, uint64_t max_command_bytes);

// One slot's bytes for these layers: the widest layer packed at `align`, rounded up to whole pages (at
// least one). The streamer sizes its slots by it; a caller choosing how many slots to pin asks it first.
uint64_t slot_bytes_for(std::span<const std::vector<model::Extent>> layers, uint32_t lba_bytes, uint64_t align, uint64_t page);

}  // namespace gpunvme::stream
