// Device side of a GPU ticket: one warp per queue pumps its share of a ticket's commands through
// device::warp_pump, folds its report into the ticket's record (device-scope atomics), and the last
// warp to finish publishes the record to the host mirror with the state word written last.
// Used by the GPU submitter (prebuilt templates) and the GPU expert fetcher (commands placed on the GPU).
#pragma once
#include <cstdint>

#include "device/warp_queue.cuh"
#include "runtime/stream/gpu_ticket.h"

namespace gpunvme::stream {

// The record as the atomics left it in L2 (loads that bypass L1, which never saw the atomics).
__device__ __forceinline__ GpuTicketRecord load_record_l2(const GpuTicketRecord* rec) {
  GpuTicketRecord r;
  const unsigned long long* src = reinterpret_cast<const unsigned long long*>(rec);
  unsigned long long* dst = reinterpret_cast<unsigned long long*>(&r);
#pragma unroll
  for (int k = 0; k < int(sizeof(GpuTicketRecord) / 8); ++k) dst[k] = __ldcg(src + k);
  return r;
}

// The host mirror and the consumer-visible state word are written only after every other field:
// a reader that sees state != kPending sees the whole record.
__device__ __forceinline__ void publish_ticket(GpuTicketRecord* rec, GpuTicketRecord* mirror, uint32_t state) {
  GpuTicketRecord r = load_record_l2(rec);
  r.state = ticket_state::kPending;
  *mirror = r;
  __threadfence_system();  // the fields reach host memory before the state word says they are final
  *const_cast<volatile uint32_t*>(&mirror->state) = state;
  *const_cast<volatile uint32_t*>(&rec->state) = state;
  __threadfence_system();
}

// Called by every lane of warp `w` (< launch.queue_count) of the ticket's kernel.
//   make(g, cid) -> nvme::SubmissionEntry   command g of the ticket (g = w + i * queue_count); called
//                                            again for g when it is re-issued (retry, controller reset)
//   done(g, status)                          once per command (success or final error), on the reaping lane;
//                                            after a queue fault, Command Abort Requested for every
//                                            command the run did not finish (issued or not)
template <class Make, class Done>
__device__ void pump_ticket(const TicketLaunch& launch, uint32_t w, uint64_t count, Make make, Done done) {
  const uint32_t lane = threadIdx.x & 31u;
  const uint32_t nq = launch.queue_count;
  GpuTicketRecord* rec = launch.record;
  uint64_t t0 = 0;
  if (lane == 0) t0 = device::global_timer_ns();
  const uint64_t mine = w < count ? (count - w + nq - 1) / nq : 0;
  auto finish = [&](uint32_t tag, nvme::Status st) {
    if (!st.ok()) atomicMin(reinterpret_cast<unsigned long long*>(&rec->first_error),
                            (static_cast<unsigned long long>(tag) << 16) | st.field);
    done(uint64_t(tag), st);
  };
  const device::QueueReport rep = device::warp_pump(
      launch.queues + w, mine, launch.depth, launch.timeout_ns,
      [&](uint64_t i, uint16_t cid, uint32_t* tag) {
        const uint64_t g = w + i * nq;
        *tag = uint32_t(g);
        return make(g, cid);
      },
      finish);
  // A faulted run: the commands it never issued end now too (warp_pump failed the unfinished
  // issued ones), so consumers of per-command words do not wait out their own bounds.
  if (rep.faults != 0) {
    const nvme::Status aborted = nvme::Status::make(nvme::sct::kGeneric, nvme::sc::kAbortRequested, false);
    for (uint64_t i = rep.issued + lane; i < mine; i += 32) finish(uint32_t(w + i * nq), aborted);
    __syncwarp();
  }
  if (lane == 0) {
    const uint64_t t1 = device::global_timer_ns();
    atomicMin(reinterpret_cast<unsigned long long*>(&rec->start_ns), static_cast<unsigned long long>(t0));
    atomicMax(reinterpret_cast<unsigned long long*>(&rec->end_ns), static_cast<unsigned long long>(t1));
    atomicOr(&rec->faults, rep.faults);
    atomicAdd(reinterpret_cast<unsigned long long*>(&rec->commands), static_cast<unsigned long long>(mine));
    atomicAdd(reinterpret_cast<unsigned long long*>(&rec->completed), static_cast<unsigned long long>(rep.completed));
    atomicAdd(reinterpret_cast<unsigned long long*>(&rec->failed), static_cast<unsigned long long>(rep.failed));
    if (rep.retries | rep.resubmitted | rep.protocol_errors) {
      atomicAdd(reinterpret_cast<unsigned long long*>(&rec->retries), static_cast<unsigned long long>(rep.retries));
      atomicAdd(reinterpret_cast<unsigned long long*>(&rec->resubmitted), static_cast<unsigned long long>(rep.resubmitted));
      atomicAdd(reinterpret_cast<unsigned long long*>(&rec->protocol_errors),
                static_cast<unsigned long long>(rep.protocol_errors));
    }
    __threadfence();  // this warp's contributions are visible before it counts itself done
    if (atomicAdd(&rec->warps_done, 1u) + 1 == nq) {
      __threadfence();
      const GpuTicketRecord r = load_record_l2(rec);
      const bool ok = r.faults == 0 && r.failed == 0 && r.completed == r.commands;
      publish_ticket(rec, launch.mirror, ok ? ticket_state::kOk : ticket_state::kFailed);
    }
  }
  __syncwarp();
}

}  // namespace gpunvme::stream
