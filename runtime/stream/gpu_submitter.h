// The GPU-initiated submitter: a kernel launched on a CUDA stream copies ready-made command templates
// into GPU-owned submission queues, stamps command ids, rings the doorbells and reaps the completions
// (device/warp_queue.cuh warp_pump, one warp per queue). No CPU on the data path: the host only
// enqueues the kernel and a CUDA event; consumers order themselves after the event, and a GPU
// consumer can also read the ticket's state word (GpuTicketRecord::state) in device memory.
//
//   GpuSubmitter gpu(ctrl, {qp1, qp2, qp3, qp4}, nsid);   // queue pairs created GPU mapped
//   gpu.prepare(plan.commands);                             // templates to device memory, once
//   uint64_t t = gpu.issue_on(plan.commands, io);            // a kernel on `io` reads
//   gpu.order_after(t, compute);                             // `compute` waits for the data
//   gpu.wait(t);                                             // host: block (bounded), throw on error
//
// Kernels of one submitter must not overlap in time: issue on one stream (their queues are shared;
// a second concurrent kernel would find them owned and its ticket fails with "queue held by another
// warp"). Use one GpuSubmitter, with its own queues, per concurrently used stream.
//
// Requires a CUDA build; the host-driven Submitter calls (issue/done/wait) work too, on an internal
// stream, so the streamer and fetcher run unchanged with a GPU submitter.
//
// Recovery: the kernels re-issue commands that fail with DNR clear (options.retry, the CPU path's
// rule); while the host waits (wait/done), a watchdog (gpu_recovery.h) aborts a command outstanding
// too long (the kernels re-issue it on its Abort Requested completion), and resets the controller
// under the running kernels when the Abort does not help or CSTS.CFS is set; they re-issue what was
// in flight. recovery() counts it all (host/recovery.h, the CPU paths' counters).
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "device/doorbell_mode.h"
#include "host/controller.h"
#include "host/queue_pair.h"
#include "driver/retry_policy.h"
#include "host/recovery.h"
#include "runtime/stream/cuda_stream.h"
#include "runtime/stream/gpu_recovery.h"
#include "runtime/stream/gpu_ticket.h"
#include "runtime/stream/submitter.h"

namespace gpunvme::device {
class DeviceQueueSet;
}

namespace gpunvme::stream {

struct GpuSubmitterOptions {
  uint32_t depth = 0;                    // commands in flight per queue; 0: entries - 1
  uint64_t timeout_ns = 2'000'000'000;   // a queue with no completion for this long fails the ticket (on the GPU)
  std::chrono::milliseconds host_timeout{60'000};  // host-side bound of wait() for a ticket's kernel to end
  uint64_t max_command_bytes = 1ull << 20;  // sizes each command id's PRP-list area (DeviceQueueSet)
  uint32_t max_tickets = 1024;           // tickets that may be outstanding (issued, not yet waited for)
  device::DoorbellMode doorbell = device::DoorbellMode::kAuto;  // who writes the doorbells (device/doorbell_mode.h)
  nvme::RetryPolicy retry = nvme::kDefaultRetryPolicy;  // re-issue of DNR-clear errors, in the kernels
  GpuRecoveryOptions recovery{};  // the watchdog: overdue command -> Abort; no help, CSTS.CFS -> controller reset
};


class GpuSubmitter final : public Submitter, public StreamOrdered {
 public:
  // `queues`: I/O queue pairs created with DmaOptions::gpu_mapped; from now on they belong to the GPU
  // (their CPU path must not be used). Throws kUnsupported without a GPU.
  GpuSubmitter(host::Controller& controller, std::vector<host::QueuePair*> queues, uint32_t nsid,
               const GpuSubmitterOptions& options = {});
  ~GpuSubmitter() override;  // waits (bounded) for every outstanding ticket
  GpuSubmitter(const GpuSubmitter&) = delete;
  GpuSubmitter& operator=(const GpuSubmitter&) = delete;

  // Copies templates to device memory once; later issues of the same span (same address and size)
  // use that copy. The span must stay alive and unchanged while prepared.
  void prepare(std::span<const nvme::SubmissionEntry> commands) override;
  // Drops the device copy of a prepared span (its owner is going away; its address may be reused).
  // Tickets already issued from it must have been waited for.
  void forget(std::span<const nvme::SubmissionEntry> commands) override;
  // Starts a kernel on `io` that reads `commands` (unprepared spans are copied for this ticket).
  uint64_t issue_on(std::span<const nvme::SubmissionEntry> commands, cuda_stream_t io) override;
  // Work enqueued on `consumer` after this call runs after the ticket's reads completed.
  void order_after(uint64_t ticket, cuda_stream_t consumer) override;
  // Device pointer to the ticket's state word (ticket_state::*); stays this ticket's until
  // max_tickets - 1 later tickets were issued (records are reused oldest first).
  const uint32_t* device_state(uint64_t ticket) const override;

  // For other components' kernels (the GPU expert fetcher): allocates a ticket, calls `launch` to
  // enqueue kernels on `stream` that finish the ticket through pump_ticket (gpu_ticket_pump.cuh),
  // records the ticket's event. `describe(g)` names command g in error messages.
  uint64_t issue_kernel(cuda_stream_t stream, const std::function<void(const TicketLaunch&)>& launch,
                        std::function<std::string(uint64_t)> describe);

  // Submitter (host-driven): issue() launches on an internal stream.
  uint64_t issue(std::span<const nvme::SubmissionEntry> commands) override;
  void progress() override {}
  bool done(uint64_t ticket) override;
  void wait(uint64_t ticket) override { wait(ticket, nullptr); }
  // Same, and the ticket's GPU timestamps (filled also when it throws for a failed read).
  void wait(uint64_t ticket, GpuTicketTimes* times);
  void wait_timed(uint64_t ticket, GpuTicketTimes* times) override { wait(ticket, times); }
  StreamOrdered* stream_ordered() override { return this; }
  void* new_marker() override;
  void delete_marker(void* marker) noexcept override;
  void mark(void* marker, cuda_stream_t stream) override;
  void wait_marker(cuda_stream_t stream, void* marker) override;
  bool marker_reached(void* marker) override;
  double marker_ms(void* from, void* to) override;

  uint32_t queue_count() const;
  device::DeviceQueueSet& queues() { return *set_; }
  uint64_t commands_completed() const { return completed_total_; }
  // Everything recovery did for this submitter so far: re-issues and protocol errors of retired
  // tickets, commands given up, the watchdog's overdue commands and stalls (as timeouts), aborts,
  // resets and time (seconds_lost).
  host::RecoveryStats recovery() const override;
  // Why the last recovery started, or why the controller was given up ("" if never).
  const std::string& last_recovery_reason() const;

 private:
  struct Ticket {
    uint32_t record = 0;  // index into the record pools
    std::span<const nvme::SubmissionEntry> commands;
    void* event = nullptr;       // cudaEvent_t recorded after the kernel
    void* own_copy = nullptr;    // device copy of an unprepared span
    std::function<std::string(uint64_t)> describe;  // names command g (issue_kernel tickets)
    uint32_t generation = 0;     // the queues' reset generation when issued
  };
  uint64_t new_ticket(Ticket t, cuda_stream_t stream, const std::function<void(const TicketLaunch&)>& launch);
  const Ticket& at(uint64_t ticket, const char* what) const;
  void retire(uint64_t ticket, Ticket& t, GpuTicketTimes* times);  // frees the ticket; throws on its error
  std::string describe_failure(const Ticket& t, const GpuTicketRecord& r) const;

  host::Controller& controller_;
  GpuSubmitterOptions options_;
  std::vector<host::QueuePair*> queue_pairs_;
  std::unique_ptr<device::DeviceQueueSet> set_;
  GpuTicketRecord* records_device_ = nullptr;  // [max_tickets] device memory (atomics)
  GpuTicketRecord* records_host_ = nullptr;    // [max_tickets] mapped pinned host mirror
  GpuTicketRecord* records_host_gpu_ = nullptr;  // GPU view of records_host_
  // Freed records are reused oldest first, so a consumer kernel still reading a retired ticket's
  // state word (device_state) finds it unchanged until max_tickets - 1 later tickets have been issued.
  std::deque<uint32_t> free_records_;
  struct Prepared {
    void* device = nullptr;
    size_t count = 0;  // templates; a span at the same address with another size is not this copy
  };
  std::unordered_map<const void*, Prepared> prepared_;  // host template address -> device copy
  std::unordered_map<uint64_t, Ticket> tickets_;
  uint64_t next_ticket_ = 1;
  void* internal_stream_ = nullptr;
  uint64_t completed_total_ = 0;
  std::unique_ptr<GpuRecovery> recovery_;
  host::RecoveryStats recovered_;  // counters of retired tickets (the watchdog's are added on read)
};

}  // namespace gpunvme::stream
