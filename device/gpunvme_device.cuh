// The single-thread device API for ntransformer-style engines: one GPU thread submits a read and
// polls its completion. C++ (CUDA) only: include from a .cu file; everything is inline (no
// relocatable device code needed). It compiles together with the host C API (runtime/capi/gpunvme.h,
// whose gpunvme_queue_t is a host queue handle): every name here is gpunvme_-prefixed and distinct.
//
//   gpunvme_device_queue_t* q = ...;                                     // a queue of a DeviceQueueSet
//   int cid = gpunvme_sq_submit_read(q, lba, nlb_minus_1, prp1, prp2);    // < 0: queue full or unusable
//   gpunvme_cq_result r = gpunvme_cq_poll_completion(q, timeout_ns);     // {timed_out, success, status, cid}
//
// Engines written against the unprefixed seed names (sq_submit_read / cq_poll_completion) define
// GPUNVME_DEVICE_SHORT_NAMES before including this header to get those two names as aliases.
//
// Ownership: a single thread drives the queue between gpunvme_queue_acquire() and
// gpunvme_queue_release() (the warp API in warp_queue.cuh uses the same claim); calls from two
// threads on one queue at once are a bug, detected by the claim. Each submission rings the SQ tail
// doorbell; each reaped completion rings the CQ head doorbell.
#pragma once
#include <stdint.h>

#include "device/device_queue.h"
#include "device/warp_queue.cuh"

// A queue pair as kernels drive it (device memory; see device/device_queue.h).
typedef gpunvme::device::DeviceQueue gpunvme_device_queue_t;

typedef struct gpunvme_cq_result {
  bool timed_out;   // no completion within timeout_ns (%globaltimer)
  bool success;     // completion with Status "Successful Completion"
  uint16_t status;  // CQE status bits 15:1 (SC 7:0, SCT 10:8, CRD, M, DNR 14); 0xFFFF: protocol error
  uint16_t cid;     // command id of the completion
} gpunvme_cq_result;

// Status value reported when the controller breaks the protocol (a CQE naming an id not in flight).
#define GPUNVME_STATUS_PROTOCOL_ERROR 0xFFFFu

namespace gpunvme::device {
// The claim id of the calling thread (disjoint from warp ids, which are small).
__device__ __forceinline__ int32_t thread_owner_id() { return int32_t(0x40000000 + blockIdx.x * blockDim.x + threadIdx.x); }
}  // namespace gpunvme::device

// Claims `q` for the calling thread; false if another warp or thread holds it.
__device__ inline bool gpunvme_queue_acquire(gpunvme_device_queue_t* q) {
  return gpunvme::device::try_own(q, gpunvme::device::thread_owner_id());
}
__device__ inline void gpunvme_queue_release(gpunvme_device_queue_t* q) {
  __threadfence();
  gpunvme::device::disown(q, gpunvme::device::thread_owner_id());
}

// Submits one NVM Read of nlb_minus_1 + 1 blocks at `lba` with the caller's PRPs and rings the doorbell.
// Returns the command id, or -1 when the queue is full (reap first) or has a sticky fault.
__device__ inline int gpunvme_sq_submit_read(gpunvme_device_queue_t* q, uint64_t lba, uint32_t nlb_minus_1,
                                             uint64_t prp1, uint64_t prp2) {
  using namespace gpunvme;
  device::DeviceQueue& d = *q;
  if (d.faults != 0 || d.in_flight >= d.entries - 1 || d.sq_ring.full() || nlb_minus_1 > 0xFFFFu) return -1;
  const uint32_t mask = d.cid_count - 1;
  uint32_t cid = d.next_cid & mask;
  uint32_t tries = 0;
  while (d.cid_busy[cid] != 0) {  // an id still in flight is never reused
    cid = (cid + 1) & mask;
    if (++tries > mask) return -1;
  }
  d.next_cid = cid + 1;
  d.cid_busy[cid] = 1;
  d.cid_tag[cid] = uint32_t(lba);
  nvme::SubmissionEntry e = nvme::make_read(d.nsid, lba, nlb_minus_1 + 1, prp1, prp2);
  e.cid = uint16_t(cid);
  device::store_sqe(d.sq + d.sq_ring.claim(1), e);
  ++d.in_flight;
  ++d.submitted;
  nvme::publish_entries_before_doorbell();
  device::write_doorbells(&d, true, d.sq_ring.tail, false, 0);
  return int(cid);
}

// Waits (bounded) for the next completion on `q` and reaps it.
__device__ inline gpunvme_cq_result gpunvme_cq_poll_completion(gpunvme_device_queue_t* q, uint64_t timeout_ns) {
  using namespace gpunvme;
  device::DeviceQueue& d = *q;
  gpunvme_cq_result r{false, false, 0, 0};
  const nvme::CompletionEntry* slot = d.cq + d.cq_ring.head;
  const uint64_t start = device::global_timer_ns();
  while (device::cqe_phase(device::load_cqe_cid_status(slot)) != d.cq_ring.phase) {
    if (device::global_timer_ns() - start > timeout_ns) {
      d.faults |= device::fault::kTimedOut;
      r.timed_out = true;
      return r;
    }
  }
  nvme::read_fields_after_phase();
  const uint2 f = device::load_cqe_tail(slot);
  const uint32_t sqhd = device::cqe_sqhd(f);
  const uint32_t cid = device::cqe_cid(f.y);
  const nvme::Status st = device::cqe_status(f.y);
  d.cq_ring.consume(1);
  if (d.in_flight > 0) --d.in_flight;
  nvme::release_slots_before_head_doorbell();
  device::write_doorbells(&d, false, 0, true, d.cq_ring.head);
  r.cid = uint16_t(cid);
  if (cid >= d.cid_count || d.cid_busy[cid] == 0) {
    d.faults |= device::fault::kWrongCid;
    r.status = GPUNVME_STATUS_PROTOCOL_ERROR;
    return r;
  }
  if (sqhd >= d.entries) {
    d.faults |= device::fault::kBadSqHead;
  } else {
    d.sq_ring.update_head(sqhd);
  }
  d.cid_busy[cid] = 0;
  ++d.completed;
  r.status = st.field;
  r.success = st.ok();
  if (!r.success) {
    if (d.failed == 0) {
      d.first_error_status = st.field;
      d.first_error_cid = uint16_t(cid);
      d.first_error_tag = d.cid_tag[cid];
    }
    ++d.failed;
  }
  return r;
}

#ifdef GPUNVME_DEVICE_SHORT_NAMES
// The seed's unprefixed names, for engines written against them (opt-in; see the top of this file).
__device__ inline int sq_submit_read(gpunvme_device_queue_t* q, uint64_t lba, uint32_t nlb_minus_1, uint64_t prp1,
                                     uint64_t prp2) {
  return gpunvme_sq_submit_read(q, lba, nlb_minus_1, prp1, prp2);
}
__device__ inline gpunvme_cq_result cq_poll_completion(gpunvme_device_queue_t* q, uint64_t timeout_ns) {
  return gpunvme_cq_poll_completion(q, timeout_ns);
}
#endif
