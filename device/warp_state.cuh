// The warp API's building blocks (device/warp_queue.cuh, device/warp_recovery.cuh): %globaltimer,
// CQE field loads, SQE stores, the doorbell stores, the queue claim, PRPs, and the warp's copy of a
// queue's state. Header-only, nvcc, sm_70 or newer.
#pragma once
#include <cstddef>
#include <cstdint>

#include "device/device_queue.h"
#include "driver/commands.h"
#include "driver/memory_order.h"
#include "driver/prp.h"
#include "driver/queue_ring.h"
#include "driver/status.h"

namespace gpunvme::device {

inline constexpr uint32_t kFullMask = 0xFFFFFFFFu;
inline constexpr uint32_t kPollRounds = 16;    // CQ slots examined per pass: 16 x 32
inline constexpr uint32_t kSubmitRounds = 16;  // SQEs written per pass: up to 16 x 32

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t lane_id() { return threadIdx.x & 31u; }

// 32-bit / 64-bit loads that always go to memory (the controller writes the CQ behind our back).
__device__ __forceinline__ uint32_t load_volatile32(const void* p) {
  return *static_cast<const volatile uint32_t*>(p);
}
__device__ __forceinline__ uint2 load_volatile64(const void* p) {
  uint2 v;
  asm volatile("ld.volatile.global.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// Writes one SQE into the ring with four 16-byte vector stores.
__device__ __forceinline__ void store_sqe(nvme::SubmissionEntry* slot, const nvme::SubmissionEntry& e) {
  const uint4* src = reinterpret_cast<const uint4*>(&e);
  uint4* dst = reinterpret_cast<uint4*>(slot);
#pragma unroll
  for (int k = 0; k < 4; ++k) dst[k] = src[k];
}

// CQE loads by the named fields of nvme::CompletionEntry (driver/commands.h asserts their offsets).
// The phase is checked on the CID+status dword alone; the other fields are read only after
// nvme::read_fields_after_phase(), as one 8-byte load of SQHD, SQID, CID and status.
static_assert(offsetof(nvme::CompletionEntry, status) == offsetof(nvme::CompletionEntry, cid) + 2);
static_assert(offsetof(nvme::CompletionEntry, cid) == offsetof(nvme::CompletionEntry, sqhd) + 4);
static_assert(offsetof(nvme::CompletionEntry, sqhd) % 8 == 0);

// CID in bits 15:0, status half-word (phase tag in bit 16) in bits 31:16.
__device__ __forceinline__ uint32_t load_cqe_cid_status(const nvme::CompletionEntry* e) {
  return load_volatile32(reinterpret_cast<const uint8_t*>(e) + offsetof(nvme::CompletionEntry, cid));
}
// .x: SQHD (15:0) and SQID (31:16); .y: CID and status as load_cqe_cid_status() returns them.
__device__ __forceinline__ uint2 load_cqe_tail(const nvme::CompletionEntry* e) {
  return load_volatile64(reinterpret_cast<const uint8_t*>(e) + offsetof(nvme::CompletionEntry, sqhd));
}
__device__ __forceinline__ uint32_t cqe_phase(uint32_t cid_status) { return (cid_status >> 16) & 1u; }
__device__ __forceinline__ uint32_t cqe_cid(uint32_t cid_status) { return cid_status & 0xFFFFu; }
__device__ __forceinline__ uint32_t cqe_sqhd(uint2 tail) { return tail.x & 0xFFFFu; }
__device__ __forceinline__ nvme::Status cqe_status(uint32_t cid_status) {
  return nvme::Status::from_cqe_status(uint16_t(cid_status >> 16));
}

// The doorbell stores (the only MMIO writes of the device API), after the caller's fence: the SQ
// tail when `sq_tail` is set, the CQ head when `cq_head` is set.
__device__ __forceinline__ void write_doorbells(const DeviceQueue* q, bool ring_sq, uint32_t sq_tail, bool ring_cq,
                                                uint32_t cq_head) {
  if (ring_sq) ring_sq_doorbell(*q, sq_tail);
  if (ring_cq) ring_cq_doorbell(*q, cq_head);
}

// Claims the queue for `who` (lane 0 of a warp, or a single thread). Returns false if held by another.
__device__ __forceinline__ bool try_own(DeviceQueue* q, int32_t who) {
  const int32_t prev = atomicCAS(&q->owner, kNoOwner, who);
  return prev == kNoOwner || prev == who;
}
__device__ __forceinline__ void disown(DeviceQueue* q, int32_t who) { atomicCAS(&q->owner, who, kNoOwner); }

// Builds PRP1/PRP2 for `bytes` at `dst_offset` of `dst`, with the list (if any) in the id's list area.
__device__ __forceinline__ bool prps_for(const DeviceQueue& q, uint16_t cid, const DeviceBuffer& dst,
                                         uint64_t dst_offset, uint64_t bytes, nvme::PrpPair* out) {
  const uint64_t page = uint64_t(1) << q.page_shift;
  const uint64_t first_page = dst_offset >> q.page_shift;
  uint64_t* list = q.prp_lists + uint64_t(cid) * (q.prp_list_bytes / 8);
  const uint64_t list_bus = q.prp_lists_bus + uint64_t(cid) * q.prp_list_bytes;
  return nvme::build_prps(
      dst_offset & (page - 1), bytes, page, [&](uint64_t k) { return dst.bus_of_page(first_page + k); },
      [&](uint32_t) { return nvme::PrpListMemory{list, list_bus}; }, out);
}

// The warp's private copy of a queue's mutable state, uniform across lanes.
struct WarpState {
  nvme::SqRing sq;
  nvme::CqRing cq;
  uint32_t next_cid;
  uint32_t in_flight;
  uint64_t submitted, completed, failed;
  uint32_t faults;
  uint16_t first_error_status;
  uint16_t first_error_cid;
  uint32_t first_error_tag;
  uint32_t generation;
  uint64_t retries, resubmitted, protocol_errors;
  // Run-local (a run ends with none pending, or with a sticky fault): ids in cid_state::kRetryPending
  // and the earliest time one of them may go again.
  uint32_t retry_pending;
  uint64_t retry_due;
};

__device__ __forceinline__ WarpState load_state(const DeviceQueue* q) {
  WarpState s;
  s.sq = q->sq_ring;
  s.cq = q->cq_ring;
  s.next_cid = q->next_cid;
  s.in_flight = q->in_flight;
  s.submitted = q->submitted;
  s.completed = q->completed;
  s.failed = q->failed;
  s.faults = q->faults;
  s.first_error_status = q->first_error_status;
  s.first_error_cid = q->first_error_cid;
  s.first_error_tag = q->first_error_tag;
  s.generation = q->generation;
  s.retries = q->retries;
  s.resubmitted = q->resubmitted;
  s.protocol_errors = q->protocol_errors;
  s.retry_pending = 0;
  s.retry_due = 0;
  return s;
}
__device__ __forceinline__ void store_state(DeviceQueue* q, const WarpState& s) {
  q->sq_ring = s.sq;
  q->cq_ring = s.cq;
  q->next_cid = s.next_cid;
  q->in_flight = s.in_flight;
  q->submitted = s.submitted;
  q->completed = s.completed;
  q->failed = s.failed;
  q->faults = s.faults;
  q->first_error_status = s.first_error_status;
  q->first_error_cid = s.first_error_cid;
  q->first_error_tag = s.first_error_tag;
  q->generation = s.generation;
  q->retries = s.retries;
  q->resubmitted = s.resubmitted;
  q->protocol_errors = s.protocol_errors;
}

// What one warp_pump() run shares between its phases (uniform across lanes).
struct PumpContext {
  DeviceQueue* q;
  uint32_t entries;
  uint32_t cid_mask;
  uint32_t max_in_flight;
  uint32_t* busy;
  uint32_t* tags;
  uint64_t* cmd;       // cid -> command index and attempt (kCmdAttemptShift)
  uint64_t* retry_at;  // cid -> %globaltimer when a pending retry may go
  const nvme::CompletionEntry* cq;
  nvme::SubmissionEntry* sq;
  const RecoveryControl* control;  // nullptr: no controller resets for this set
  QueueHealth* health;             // nullptr: no watchdog
};

__device__ __forceinline__ PumpContext pump_context(DeviceQueue* q, uint32_t depth) {
  PumpContext c{q,          q->entries, q->cid_count - 1, q->entries - 1, q->cid_busy, q->cid_tag, q->cid_cmd,
                q->cid_retry_at, q->cq, q->sq,           q->control,      q->health};
  if (depth != 0 && depth < c.max_in_flight) c.max_in_flight = depth;
  return c;
}

// The warp's %globaltimer, read by lane 0 and shared (uniform across lanes).
__device__ __forceinline__ uint64_t warp_now() {
  uint64_t now = 0;
  if (lane_id() == 0) now = global_timer_ns();
  return __shfl_sync(kFullMask, now, 0);
}

// The smallest of the lanes' values (64-bit; __reduce_min_sync is 32-bit only).
__device__ __forceinline__ uint64_t warp_min64(uint64_t v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    const uint64_t o = __shfl_xor_sync(kFullMask, v, d);
    v = o < v ? o : v;
  }
  return v;
}

}  // namespace gpunvme::device
