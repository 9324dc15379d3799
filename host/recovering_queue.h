// One queue pair's commands with the recovery of issue #15, for every CPU submitter:
//   - an error completion is retried per driver/retry_policy.h (DNR clear: resubmitted after a
//     backoff, bounded; DNR set or attempts spent: delivered as the final outcome);
//   - a command past its deadline is aborted (Admin Abort); if the abort does not bring its
//     completion within abort_timeout, or CSTS.CFS is set, the controller is reset
//     (Controller::reset) and every command that was in flight is resubmitted;
//   - a completion for a command id not in flight is a protocol error: counted, never delivered;
//   - BAR0 reading all ones (surprise removal) or a failed reset is final: reap() throws at once.
// Callers tag their commands (tags are theirs; command ids change on every resubmission) and get
// one Outcome per tag. The fault-free cost: a 64-byte copy per place(), one predictable branch per
// completion, one clock read and two compares per reap().
//
// Threads: one thread drives one RecoveringQueue. A reset recreates every queue of the controller;
// the other queues' RecoveringQueues notice it (QueuePair::generation) on their next reap() and
// resubmit what they had in flight. A reset while another thread is inside place()/reap() on
// another queue of the same controller is not synchronised: recovery assumes one active queue per
// controller per moment, or faults that stay on one queue (see README "Faults and recovery").
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "host/controller.h"
#include "host/queue_pair.h"
#include "host/recovery.h"

namespace gpunvme::host {

struct Outcome {
  uint64_t tag = 0;
  nvme::Status status{};  // final status (success, or the last error)
  uint32_t dw0 = 0;
  uint32_t attempts = 0;   // submissions it took
  bool lost = false;       // no completion ever came (attempts spent on timeouts); status is Abort Requested
  bool ok() const { return status.ok(); }
};

class RecoveringQueue {
 public:
  using Clock = std::chrono::steady_clock;
  RecoveringQueue(Controller& controller, QueuePair& queue, const RecoveryOptions& options = {});
  RecoveringQueue(const RecoveringQueue&) = delete;
  RecoveringQueue& operator=(const RecoveringQueue&) = delete;

  // Room for new commands (commands waiting for a retry take theirs first).
  uint32_t free_slots() const;
  // Queues `entry` (its cid is ours to set) under `tag`; does not ring. Throws kResource when full.
  void place(const nvme::SubmissionEntry& entry, uint64_t tag);
  void ring() { queue_.ring_sq_doorbell(); }
  // Final outcomes, at most `max`; runs the recovery (retries due, deadlines, abort, reset).
  // Throws kControllerFatal (device removed, reset impossible) or what a failed reset threw.
  uint32_t reap(Outcome* out, uint32_t max);
  // Commands placed and not yet delivered by reap().
  uint32_t outstanding() const { return outstanding_; }
  // Forgets every command (the caller gives up after a throw from reap()).
  void abandon();

  const RecoveryStats& stats() const { return stats_; }
  QueuePair& queue() { return queue_; }
  Controller& controller() { return controller_; }

 private:
  struct Cmd {
    nvme::SubmissionEntry entry{};
    uint64_t tag = 0;
    uint32_t attempts = 0;
    bool live = false;              // on the queue under this cid
    Clock::time_point seen{};       // first deadline scan that saw it in flight (zero: not yet)
    Clock::time_point abort_by{};   // aborted: reset if still in flight after this (zero: not aborted)
  };
  struct Waiting {
    Cmd cmd;
    Clock::time_point not_before;
    Clock::time_point since;  // when the error came (for seconds_lost)
  };
  bool deliver_error(Cmd& c, const Completion& done, Outcome* out);
  void resubmit_due();
  void scan();
  void abort_overdue(uint16_t cid, Cmd& c);
  void reset_and_resubmit(const std::string& why);
  void take_back_after_reset();
  [[noreturn]] void device_removed();

  Controller& controller_;
  QueuePair& queue_;
  RecoveryOptions options_;
  std::chrono::nanoseconds scan_every_;
  std::vector<Cmd> by_cid_;
  std::deque<Waiting> waiting_;   // retries not yet resubmitted
  std::vector<Outcome> ready_;    // final outcomes decided outside reap()'s output (during a scan)
  uint32_t outstanding_ = 0;
  uint32_t resets_without_progress_ = 0;  // bounds a controller that fails again at once, every time
  uint64_t generation_ = 0;
  uint64_t protocol_base_ = 0;
  Clock::time_point now_{};
  Clock::time_point next_scan_{};
  RecoveryStats stats_;
};

}  // namespace gpunvme::host
