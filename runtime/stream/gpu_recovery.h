// Recovery of the GPU path, host side: a watchdog over the queues a GPU submitter's kernels drive.
// While the host waits for GPU work it calls poll(); poll() looks at each queue's health word (mapped
// host memory the warps write, device_queue.h QueueHealth) and, every few checks, at CSTS. A queue
// whose warp runs but has made no progress for `stall_timeout` (a dropped or very late completion),
// or a controller reporting CSTS.CFS, starts one recovery:
//   quiesce the warps (they park, device/warp_recovery.cuh) -> host::Controller::reset (queue pairs
//   recreated at the same addresses) -> resume: each warp restarts its rings and re-issues what was
//   in flight, in the same kernel (no relaunch; the ticket simply completes later).
// A reset that fails (device removed, never ready) ends the kernels with fault::kControllerLost at
// once, and so does every later ticket: one clear final error, no retry storm. More than max_resets
// resets within reset_window is treated the same way. With doorbell=cpu the watchdog stays off (the
// forwarder would keep the old ring positions): a stall ends, as before, by the kernels' timeout.
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
  // A running queue with no progress this long is reset. Keep it below the kernels' own timeout
  // (GpuSubmitterOptions::timeout_ns), which stays the backstop when no one polls. 0: no watchdog.
  std::chrono::milliseconds stall_timeout{500};
  std::chrono::microseconds check_period{1000};  // health words at most this often; CSTS every 10th check
  std::chrono::milliseconds quiesce_timeout{1000};  // for every running warp to park
  uint32_t max_resets = 8;                        // within reset_window; one more gives up
  std::chrono::milliseconds reset_window{60'000};
};

struct GpuRecoveryStats {
  uint64_t stalls = 0;             // queues found without progress (host::RecoveryStats::timeouts)
  uint64_t resets = 0;             // controller resets this watchdog did
  double recovery_seconds = 0;     // time from the decision to the kernels' resume
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
  std::string stalled_queue(std::chrono::steady_clock::time_point now);
  std::string controller_failure() const;
  void give_up(const std::string& why);

  host::Controller& controller_;
  device::DeviceQueueSet& queues_;
  GpuRecoveryOptions options_;
  struct Seen {
    uint64_t progress = 0;
    std::chrono::steady_clock::time_point since{};
  };
  std::vector<Seen> seen_;
  bool can_reset_ = false;  // not with doorbell=cpu: then stalls end by the kernels' own timeout
  std::chrono::steady_clock::time_point next_check_{};
  uint64_t checks_ = 0;
  std::deque<std::chrono::steady_clock::time_point> recent_resets_;
  GpuRecoveryStats stats_;
  std::string failure_;
};

}  // namespace gpunvme::stream
