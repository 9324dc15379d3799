// The CPU-initiated submitter: copies plan templates into a host::QueuePair (take_cid/place, one
// doorbell per batch), reaps completions, and tracks which ticket every command id belongs to.
// Thread-safe: an optional pump thread keeps the queue fed while the consumer computes.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "host/controller.h"
#include "host/queue_pair.h"
#include "runtime/stream/submitter.h"

namespace gpunvme::stream {

struct CpuSubmitterOptions {
  uint32_t queue_depth = 0;  // commands kept in flight; 0: the queue's entries - 1
  std::chrono::milliseconds timeout{5000};  // no completion for this long while waiting: kTimeout
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

  uint64_t commands_completed() const { return completed_total_.load(); }
  host::QueuePair& queue() { return queue_; }

 private:
  struct Job {
    std::span<const nvme::SubmissionEntry> commands;
    size_t next = 0;        // next template to submit
    size_t completed = 0;
    bool failed = false;
    host::Completion failure{};
    uint64_t failed_slba = 0;
    uint32_t failed_nblocks = 0;
  };
  bool progress_locked();  // true when anything moved
  void pump();

  host::Controller& controller_;
  host::QueuePair& queue_;
  CpuSubmitterOptions options_;
  std::mutex mu_;
  uint64_t next_ticket_ = 1;
  std::unordered_map<uint64_t, Job> jobs_;
  std::deque<uint64_t> pending_;       // tickets with templates not yet submitted, FIFO
  std::vector<uint64_t> owner_;        // command id -> ticket
  std::vector<uint32_t> owner_index_;  // command id -> template index
  uint32_t in_flight_ = 0;
  std::atomic<uint64_t> completed_total_{0};
  std::atomic<bool> stop_{false};
  std::thread pump_;
};

}  // namespace gpunvme::stream
