// The CPU-initiated submitter: copies plan templates into a host::QueuePair through a
// host::RecoveringQueue (retries, aborts, controller resets: issue #15), one doorbell per batch,
// reaps final outcomes and tracks which ticket every command belongs to.
// Thread-safe: an optional pump thread keeps the queue fed while the consumer computes.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "host/controller.h"
#include "host/error.h"
#include "host/queue_pair.h"
#include "host/recovering_queue.h"
#include "runtime/stream/submitter.h"

namespace gpunvme::stream {

struct CpuSubmitterOptions {
  uint32_t queue_depth = 0;  // commands kept in flight; 0: the queue's entries - 1
  std::chrono::milliseconds timeout{5000};        // per command: past this it is aborted, then the controller reset
  std::chrono::milliseconds abort_timeout{1000};  // an aborted command still without completion: reset
  nvme::RetryPolicy retry = nvme::kDefaultRetryPolicy;
  bool pump_thread = false;  // a thread that calls progress() while work is queued
};

class CpuSubmitter final : public Submitter {
 public:
  CpuSubmitter(host::Controller& controller, host::QueuePair& queue, const CpuSubmitterOptions& options = {});
  ~CpuSubmitter() override;
  CpuSubmitter(const CpuSubmitter&) = delete;
  CpuSubmitter& operator=(const CpuSubmitter&) = delete;

  uint64_t issue(std::span<const nvme::SubmissionEntry> commands) override;
  void progress() override;
  bool done(uint64_t ticket) override;
  void wait(uint64_t ticket) override;
  host::RecoveryStats recovery() const override;

  uint64_t commands_completed() const { return completed_total_.load(); }
  host::QueuePair& queue() { return queue_; }

 private:
  struct Job {
    std::span<const nvme::SubmissionEntry> commands;
    size_t next = 0;        // next template to submit
    size_t completed = 0;
    bool failed = false;
    host::Outcome failure{};
    size_t failed_index = 0;
  };
  // A command's tag: its ticket and its index in the ticket's span.
  static constexpr unsigned kIndexBits = 24;
  bool progress_locked();  // true when anything moved
  void fail_all_locked(const Error& e);
  void pump();

  host::Controller& controller_;
  host::QueuePair& queue_;
  CpuSubmitterOptions options_;
  host::RecoveringQueue rq_;
  mutable std::mutex mu_;
  uint64_t next_ticket_ = 1;
  std::unordered_map<uint64_t, Job> jobs_;
  std::deque<uint64_t> pending_;  // tickets with templates not yet submitted, FIFO
  std::string fatal_;             // recovery gave up (device removed, reset failed): every wait throws it
  ErrorKind fatal_kind_ = ErrorKind::kControllerFatal;
  std::atomic<uint64_t> completed_total_{0};
  std::atomic<bool> stop_{false};
  std::thread pump_;
};

}  // namespace gpunvme::stream
