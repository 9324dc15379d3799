// A queue pair as GPU kernels see it: plain data, built by the host (device/queue_set.h) in device memory.
//
// Ownership model: a DeviceQueue is driven by exactly one agent at a time, either one whole warp (the
// C++ warp API in device/warp_queue.cuh, used by every read kernel: the warp's 32 lanes write SQEs and
// poll CQEs together) or one thread (the single-thread device API in device/gpunvme_device.cuh). The
// agent claims the queue through `owner` (atomicCAS from kNoOwner) and gives it back when its kernel
// part ends; a second claimant gets QueueFault::kNotOwner instead of racing on the rings. The host leaves the
// queue's memory alone while kernels own it (host::QueuePair's CPU path must not be used on it).
// Ring, command-id and counter state lives here between kernels, so ownership can move from one kernel
// (or warp) to the next with commands still in flight.
//
// Recovery (device/warp_recovery.cuh): a command that completes with a retryable error is re-issued by
// the warp from its command index (cid_cmd) under driver/retry_policy.h; a controller reset is done by
// the host while the warps are parked (RecoveryControl::quiesce), and each warp rebuilds its rings
// when it sees a new RecoveryControl::generation.
#pragma once
#include <cstddef>
#include <cstdint>

#include "driver/commands.h"
#include "driver/compiler.h"
#include "driver/memory_order.h"
#include "driver/queue_ring.h"
#include "driver/retry_policy.h"

namespace gpunvme::device {

// Why a queue stopped: bits in DeviceQueue::faults (sticky until the host rebuilds the queue).
namespace fault {
inline constexpr uint32_t kTimedOut = 1u << 0;    // no completion within the bound (%globaltimer)
inline constexpr uint32_t kWrongCid = 1u << 1;    // a CQE named an id that is not in flight (or twice)
inline constexpr uint32_t kBadSqHead = 1u << 2;   // CQE.SQHD outside the ring
inline constexpr uint32_t kNotOwner = 1u << 3;    // the queue was held by another warp/thread
inline constexpr uint32_t kBadRequest = 1u << 4;  // a request broke a rule (PRPs: alignment, buffer bounds)
inline constexpr uint32_t kControllerLost = 1u << 5;  // parked for a reset that failed (removed, never ready)
inline constexpr uint32_t kParkTimedOut = 1u << 6;    // parked for a reset the host did not finish in time
}  // namespace fault

inline constexpr int32_t kNoOwner = -1;

// Values of a command id's busy word (DeviceQueue::cid_busy).
namespace cid_state {
inline constexpr uint32_t kFree = 0;
inline constexpr uint32_t kInFlight = 1;      // submitted, its CQE not yet reaped
inline constexpr uint32_t kRetryPending = 2;  // failed retryably (or lost in a reset); re-issued when due
}  // namespace cid_state

// DeviceQueue::cid_cmd: the command index of the warp's run (bits 55:0) and the submissions made
// before the current one (bits 63:56; 0 on the first, so the hot path stores the bare index).
inline constexpr uint32_t kCmdAttemptShift = 56;
inline constexpr uint64_t kCmdIndexMask = (uint64_t(1) << kCmdAttemptShift) - 1;

// Written by the host (device memory, one per DeviceQueueSet), read by every warp of the set.
struct RecoveryControl {
  // quiesce and oldest_request are one 64-bit word that a warp loads once per pump pass and compares
  // with one value; anything else is the rare path.
  uint32_t quiesce = 0;         // non-zero: warps stop submitting and park
  uint32_t oldest_request = 0;  // bumped by the host's watchdog: each running warp publishes its oldest
                                // in-flight command once (QueueHealth::oldest), the Abort's target
  uint32_t generation = 0;  // bumped after each controller reset: a warp seeing a new one rebuilds its rings
  uint32_t failed = 0;      // with the bump: the reset failed; parked warps end with fault::kControllerLost
  uint64_t park_timeout_ns = 10'000'000'000;  // a warp parked longer ends with fault::kParkTimedOut
};
static_assert(sizeof(RecoveryControl) == 24);
static_assert(offsetof(RecoveryControl, quiesce) == 0 && offsetof(RecoveryControl, oldest_request) == 4,
              "the pump loads both as one little-endian 64-bit word");

// Written by a queue's warp (mapped host memory, one per queue), read by the host's watchdog.
namespace health_state {
inline constexpr uint32_t kIdle = 0;     // no warp holds the queue
inline constexpr uint32_t kRunning = 1;  // a warp pumps it
inline constexpr uint32_t kParked = 2;   // a warp holds it but stopped for a reset
}  // namespace health_state
// QueueHealth::oldest: the in-flight command with the lowest command index of the warp's run (the
// one submitted first), so the host knows which command to abort (Admin Abort names SQID and CID).
// One 64-bit word, so the host never reads a torn pair: index (bits 63:24, low 40 bits), the
// submissions made before this one (23:16, as in cid_cmd), CID (15:0). The same value for longer
// than the watchdog's bound means the same submission of the same command is still outstanding.
inline constexpr uint64_t kNoOldest = ~uint64_t(0);
GPUNVME_HD constexpr uint64_t pack_oldest(uint64_t index, uint32_t attempt, uint32_t cid) {
  return ((index & ((uint64_t(1) << 40) - 1)) << 24) | (uint64_t(attempt & 0xFFu) << 16) | (cid & 0xFFFFu);
}
GPUNVME_HD constexpr uint16_t oldest_cid(uint64_t oldest) { return uint16_t(oldest & 0xFFFFu); }
GPUNVME_HD constexpr uint64_t oldest_index(uint64_t oldest) { return oldest >> 24; }
struct QueueHealth {
  uint64_t progress = 0;    // %globaltimer of a recent pass that submitted or reaped (changes while healthy)
  uint32_t state = health_state::kIdle;
  uint32_t in_flight = 0;   // at the last progress store or park
  uint64_t oldest = kNoOldest;  // pack_oldest(), written when the host asks (RecoveryControl::oldest_request)
};
static_assert(sizeof(QueueHealth) == 24);

struct DeviceQueue {
  // ---- Set by the host, read-only for kernels. ----
  nvme::SubmissionEntry* sq = nullptr;   // GPU view of the SQ ring (DMA memory mapped into the GPU)
  nvme::CompletionEntry* cq = nullptr;   // GPU view of the CQ ring
  volatile uint32_t* sq_doorbell = nullptr;  // GPU view of BAR0 + SQ tail doorbell offset, or of a mailbox slot
  volatile uint32_t* cq_doorbell = nullptr;  // GPU view of BAR0 + CQ head doorbell offset, or of a mailbox slot
  uint32_t* cid_busy = nullptr;   // [cid_count] device memory: 1 while that command id is in flight
  uint32_t* cid_tag = nullptr;    // [cid_count] device memory: the submitter's tag for each id in flight
  uint64_t* prp_lists = nullptr;  // GPU view of per-id PRP list areas (DMA memory), prp_list_bytes each
  uint64_t prp_lists_bus = 0;     // bus address of prp_lists[0]
  uint32_t prp_list_bytes = 0;    // per command id; divides the page so a list never crosses a page
  uint32_t cid_count = 0;         // power of two, >= entries
  uint32_t entries = 0;           // SQ and CQ entries
  uint16_t qid = 0;
  uint16_t pad0 = 0;
  uint32_t nsid = 0;
  uint32_t lba_shift = 0;         // log2(LBA bytes)
  uint32_t max_blocks = 0;        // per command: MDTS, NLB and the PRP list area all respected
  uint32_t page_shift = 12;       // CC.MPS
  uint64_t* cid_cmd = nullptr;      // [cid_count] device memory: command index and attempt (kCmdAttemptShift)
  uint64_t* cid_retry_at = nullptr; // [cid_count] device memory: %globaltimer after which a retry may go
  const RecoveryControl* control = nullptr;  // device memory shared by the set; nullptr: no resets
  QueueHealth* health = nullptr;    // GPU view of this queue's watchdog word, or nullptr
  nvme::RetryPolicy retry{};        // driver/retry_policy.h, the CPU path's rule

  // ---- Mutable: owned by the agent that holds the queue. ----
  nvme::SqRing sq_ring{};
  nvme::CqRing cq_ring{};
  uint32_t next_cid = 0;          // command ids are handed out round-robin, skipping ids still busy
  uint32_t in_flight = 0;         // submitted, CQE not yet reaped
  uint64_t submitted = 0;
  uint64_t completed = 0;         // commands finished: success or a final error (not retried attempts)
  uint64_t failed = 0;            // ... of which with a final error status
  uint32_t faults = 0;            // fault:: bits
  uint16_t first_error_status = 0;  // Status::field of the first failed command
  uint16_t first_error_cid = 0;
  uint32_t first_error_tag = 0;
  int32_t owner = kNoOwner;
  uint32_t generation = 0;        // the RecoveryControl::generation these rings belong to
  uint64_t retries = 0;           // completions with a retryable error that were re-issued
  uint64_t resubmitted = 0;       // commands in flight at a controller reset, re-issued after it
  uint64_t protocol_errors = 0;   // CQEs naming an id not in flight (never completing a command)
};

// The doorbell stores, the only place kernels write a doorbell. The pointer is BAR0's register
// (doorbell=gpu) or the queue's slot in a host mailbox that a CPU thread forwards to that register
// (doorbell=cpu, host/doorbell_forwarder.h); either way one 32-bit volatile store. Callers fence first
// (nvme::publish_entries_before_doorbell / release_slots_before_head_doorbell).
GPUNVME_HD inline void ring_sq_doorbell(const DeviceQueue& q, uint32_t tail) { nvme::mmio_write32(q.sq_doorbell, tail); }
GPUNVME_HD inline void ring_cq_doorbell(const DeviceQueue& q, uint32_t head) { nvme::mmio_write32(q.cq_doorbell, head); }

// What one warp's (or thread's) part of a kernel achieved on its queue.
struct QueueReport {
  uint64_t submitted = 0;
  uint64_t completed = 0;  // commands finished: success or a final error (retried attempts not counted)
  uint64_t failed = 0;     // non-success status
  uint64_t elapsed_ns = 0; // %globaltimer, first submission to last completion
  uint32_t faults = 0;     // fault:: bits raised during this run
  uint16_t first_error_status = 0;
  uint16_t qid = 0;
  uint32_t first_error_tag = 0;
  uint32_t pad = 0;
  uint64_t retries = 0;      // re-issues after a retryable error status
  uint64_t resubmitted = 0;  // re-issues after a controller reset
  uint64_t protocol_errors = 0;
  uint64_t issued = 0;       // commands 0..issued-1 were built by make(); with a fault, the rest never were
};

// A DMA buffer as kernels see it. Tier 1: pinned host memory mapped into the GPU; the controller
// writes it by DMA at `bus` addresses and kernels read it through `gpu`.
struct DeviceBuffer {
  uint8_t* gpu = nullptr;          // GPU view
  uint64_t bytes = 0;
  uint64_t bus_base = 0;           // bus address of byte 0 when the IOVA range is contiguous
  const uint64_t* page_bus = nullptr;  // otherwise: bus address of every page (device memory, built once)
  uint32_t page_shift = 12;

  GPUNVME_HD uint64_t bus_of_page(uint64_t page_index) const {
    return page_bus ? page_bus[page_index] : bus_base + (page_index << page_shift);
  }
};

}  // namespace gpunvme::device
