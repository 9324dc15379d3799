// What the GPU submitter's kernels report for one ticket: plain data in device memory, updated with
// device-scope atomics by every warp of the ticket's kernel, then copied by the last warp to a host
// mirror (mapped pinned memory) with `state` written last. Shared by host and device code.
#pragma once
#include <cstdint>

namespace gpunvme::device {
struct DeviceQueue;
}

namespace gpunvme::stream {

namespace ticket_state {
inline constexpr uint32_t kPending = 0;
inline constexpr uint32_t kOk = 1;      // every command completed with a success status
inline constexpr uint32_t kFailed = 2;  // a command failed, or a queue faulted (timeout, wrong id, ...)
}  // namespace ticket_state

struct GpuTicketRecord {
  uint32_t state = ticket_state::kPending;  // what a consumer kernel reads (SlotView::status)
  uint32_t warps_done = 0;           // the last of the launch's warps publishes the record
  uint32_t pad = 0;
  uint32_t faults = 0;               // device::fault bits of any warp
  uint64_t first_error = ~0ull;      // (template index << 16) | status field, smallest index wins
  uint64_t start_ns = ~0ull;         // %globaltimer: first submission of any warp
  uint64_t end_ns = 0;               // last completion of any warp
  uint64_t commands = 0;
  uint64_t completed = 0;            // commands finished: success or a final error
  uint64_t failed = 0;               // ... with a final error status
  uint64_t retries = 0;              // re-issues after a retryable error status (driver/retry_policy.h)
  uint64_t resubmitted = 0;          // re-issues after a controller reset
  uint64_t protocol_errors = 0;      // CQEs naming a command id not in flight
  uint64_t pad1 = 0;
};
static_assert(sizeof(GpuTicketRecord) == 96);

// Everything a ticket's kernel needs besides its command source (gpu_ticket_pump.cuh).
struct TicketLaunch {
  device::DeviceQueue* queues = nullptr;  // device memory, one warp per queue
  uint32_t queue_count = 0;
  uint32_t depth = 0;
  uint64_t timeout_ns = 0;
  GpuTicketRecord* record = nullptr;  // device memory, initialised as a fresh GpuTicketRecord
  GpuTicketRecord* mirror = nullptr;  // GPU view of the host mirror
};

}  // namespace gpunvme::stream
