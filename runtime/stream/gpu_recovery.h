// Recovery of the GPU path, host side: a watchdog over the queues a GPU submitter's kernels drive.
// While the host waits for GPU work it calls poll(); poll() looks at each queue's health word (mapped
// host memory the warps write, device_queue.h QueueHealth) and, every few checks, at CSTS. The
// discipline is the CPU path's (host/recovering_queue.h), with the host owning the admin queue:
//   - a running queue without progress for `stall_timeout` is asked for its oldest in-flight
//     command (DeviceQueueSet::ask_oldest: its warp answers within one pass; a fault-free pass pays
//     nothing for it) and gets an Admin Abort for that SQID/CID. The controller completes the
//     command with Command Abort Requested (DNR clear), which the warp re-issues under
//     driver/retry_policy.h like any retryable error: no reset, no host round trip. A lost command
//     among others that still complete is found when its queue has nothing else to do;
//   - the Abort refused (the controller does not have the command: a lost completion), not answered
//     within `abort_timeout`, no progress `abort_timeout` after it, no answer to the ask, or
//     CSTS.CFS set start a controller reset: quiesce the warps (they park, device/warp_recovery.cuh)
//     -> host::Controller::reset (queue pairs recreated at the same addresses) -> resume: each warp
//     restarts its rings and re-issues what was in flight, in the same kernel (no relaunch).
// A reset that fails (device removed, never ready) ends the kernels with fault::kControllerLost at
// once, and so does every later ticket: one clear final error, no retry storm. More than max_resets
// resets within reset_window is treated the same way. With doorbell=cpu the set's forwarder is held
// during the reset and restarted at the new ring positions (DeviceQueueSet::quiesce / resume).
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "host/controller.h"

namespace gpunvme::device {
class DeviceQueueSet;
}

namespace gpunvme::stream {

struct GpuRecoveryOptions {
  // A running queue with no progress this long has its oldest command aborted. Keep it below the
  // kernels' own timeout (GpuSubmitterOptions::timeout_ns), which stays the backstop when no one
  // polls. 0: no watchdog.
  std::chrono::milliseconds stall_timeout{500};
  // The Abort's own completion, and then the aborted command's, each within this; else a reset.
  std::chrono::milliseconds abort_timeout{1000};
  std::chrono::milliseconds ask_timeout{100};  // for a stalled queue's warp to name its oldest command
  std::chrono::microseconds check_period{1000};  // health words at most this often; CSTS every 10th check
  std::chrono::milliseconds quiesce_timeout{1000};  // for every running warp to park
  uint32_t max_resets = 8;                        // within reset_window; one more gives up
  std::chrono::milliseconds reset_window{60'000};
};

struct GpuRecoveryStats {
  uint64_t stalls = 0;             // stalled queues found (host::RecoveryStats::timeouts)
  uint64_t aborts = 0;             // Admin Abort commands sent (host::RecoveryStats::aborts)
  uint64_t resets = 0;             // controller resets this watchdog did
  double recovery_seconds = 0;     // stalled queues' waits and their Aborts; resets: decision to resume
  std::string last_reason;         // why the last recovery started ("" if none)
};

class GpuRecovery {
 public:
  GpuRecovery(host::Controller& controller, device::DeviceQueueSet& queues, const GpuRecoveryOptions& options);

  // Cheap unless a check is due; recovers when a queue stalled or the controller failed.
  void poll();
  // Recovers now (a kernel ended with a sticky queue fault: a protocol error, its own timeout):
  // quiesce, reset, resume, so the queues work again. Does nothing once the controller was given up.
  void recover(const std::string& why);
  const GpuRecoveryStats& stats() const { return stats_; }
  // Set once the controller is given up: why, for the error of every ticket that fails from then on.
  const std::string& failure() const { return failure_; }

 private:
  using Clock = std::chrono::steady_clock;
  // What the host remembers of a queue between checks.
  struct Seen {
    uint64_t progress = 0;
    Clock::time_point since{};       // when `progress` last changed (or the queue started running)
    uint64_t aborted = 0;            // the command an Abort was sent for (kNoOldest: none)
    Clock::time_point abort_by{};    // progress must come by then
  };
  // "" or why the controller must be reset; sends an Abort for a stalled queue's oldest command.
  std::string check_queue(uint32_t i, Clock::time_point now);
  std::string abort_command(uint32_t i, uint64_t oldest, const std::string& why, Clock::time_point stalled_since);
  std::string controller_failure() const;
  void give_up(const std::string& why);

  host::Controller& controller_;
  device::DeviceQueueSet& queues_;
  GpuRecoveryOptions options_;
  std::vector<Seen> seen_;
  std::chrono::steady_clock::time_point next_check_{};
  uint64_t checks_ = 0;
  std::deque<std::chrono::steady_clock::time_point> recent_resets_;
  GpuRecoveryStats stats_;
  std::string failure_;
};

}  // namespace gpunvme::stream
