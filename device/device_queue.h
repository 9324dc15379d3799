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
#pragma once
#include <cstdint>

#include "driver/commands.h"
#include "driver/compiler.h"
#include "driver/memory_order.h"
#include "driver/queue_ring.h"

namespace gpunvme::device {

// Why a queue stopped: bits in DeviceQueue::faults (sticky until the host rebuilds the queue).
namespace fault {
inline constexpr uint32_t kTimedOut = 1u << 0;    // no completion within the bound (%globaltimer)
inline constexpr uint32_t kWrongCid = 1u << 1;    // a CQE named an id that is not in flight (or twice)
inline constexpr uint32_t kBadSqHead = 1u << 2;   // CQE.SQHD outside the ring
inline constexpr uint32_t kNotOwner = 1u << 3;    // the queue was held by another warp/thread
inline constexpr uint32_t kBadRequest = 1u << 4;  // a request broke a rule (PRPs: alignment, buffer bounds)
}  // namespace fault

inline constexpr int32_t kNoOwner = -1;

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

  // ---- Mutable: owned by the agent that holds the queue. ----
  nvme::SqRing sq_ring{};
  nvme::CqRing cq_ring{};
  uint32_t next_cid = 0;          // command ids are handed out round-robin, skipping ids still busy
  uint32_t in_flight = 0;         // submitted, CQE not yet reaped
  uint64_t submitted = 0;
  uint64_t completed = 0;         // CQEs reaped with a valid id (any status)
  uint64_t failed = 0;            // ... of which had a non-success status
  uint32_t faults = 0;            // fault:: bits
  uint16_t first_error_status = 0;  // Status::field of the first failed command
  uint16_t first_error_cid = 0;
  uint32_t first_error_tag = 0;
  int32_t owner = kNoOwner;
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
  uint64_t completed = 0;  // valid completions reaped, any status
  uint64_t failed = 0;     // non-success status
  uint64_t elapsed_ns = 0; // %globaltimer, first submission to last completion
  uint32_t faults = 0;     // fault:: bits raised during this run
  uint16_t first_error_status = 0;
  uint16_t qid = 0;
  uint32_t first_error_tag = 0;
  uint32_t pad = 0;
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
