#include "runtime/stream/cpu_submitter.h"

#include <algorithm>
#include <string>

#include "host/error.h"

namespace gpunvme::stream {

CpuSubmitter::CpuSubmitter(host::Controller& controller, host::QueuePair& queue, const CpuSubmitterOptions& options)
    : controller_(controller), queue_(queue), options_(options) {
  const uint32_t max_depth = queue.entries() - 1;
  if (options_.queue_depth == 0 || options_.queue_depth > max_depth) options_.queue_depth = max_depth;
  owner_.assign(queue.entries(), 0);
  owner_index_.assign(queue.entries(), 0);
  if (options_.pump_thread) pump_ = std::thread([this] { pump(); });
}

CpuSubmitter::~CpuSubmitter() {
  stop_ = true;
  if (pump_.joinable()) pump_.join();
}

uint64_t CpuSubmitter::issue(std::span<const nvme::SubmissionEntry> commands) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t t = next_ticket_++;
  Job& j = jobs_[t];
  j.commands = commands;
  if (!commands.empty()) pending_.push_back(t);
  progress_locked();
  return t;
}

bool CpuSubmitter::progress_locked() {
  bool moved = false;
  host::Completion batch[64];
  for (;;) {
    const uint32_t n = queue_.poll(batch, 64);
    for (uint32_t i = 0; i < n; ++i) {
      const uint16_t cid = batch[i].cid;
      --in_flight_;
      auto it = jobs_.find(owner_[cid]);
      if (it == jobs_.end()) continue;  // a ticket abandoned after a timeout
      Job& j = it->second;
      ++j.completed;
      if (!batch[i].ok() && !j.failed) {
        j.failed = true;
        j.failure = batch[i];
        const nvme::SubmissionEntry& e = j.commands[owner_index_[cid]];
        j.failed_slba = nvme::rw_slba(e);
        j.failed_nblocks = nvme::rw_nblocks(e);
      }
    }
    completed_total_ += n;
    if (n > 0) moved = true;
    if (n < 64) break;
  }
  bool placed = false;
  while (!pending_.empty() && in_flight_ < options_.queue_depth && queue_.free_slots() > 0) {
    Job& j = jobs_[pending_.front()];
    const uint64_t t = pending_.front();
    while (j.next < j.commands.size() && in_flight_ < options_.queue_depth && queue_.free_slots() > 0) {
      const uint16_t cid = queue_.take_cid();
      owner_[cid] = t;
      owner_index_[cid] = uint32_t(j.next);
      queue_.place(cid, j.commands[j.next]);
      ++j.next;
      ++in_flight_;
      placed = true;
    }
    if (j.next == j.commands.size()) pending_.pop_front();
  }
  if (placed) {
    queue_.ring_sq_doorbell();
    moved = true;
  }
  return moved;
}

void CpuSubmitter::progress() {
  std::lock_guard<std::mutex> lock(mu_);
  progress_locked();
}

bool CpuSubmitter::done(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  progress_locked();
  auto it = jobs_.find(ticket);
  if (it == jobs_.end()) return true;
  return it->second.completed == it->second.commands.size();
}

void CpuSubmitter::wait(uint64_t ticket) {
  auto last_progress = std::chrono::steady_clock::now();
  auto next_health = last_progress;
  uint32_t idle = 0;
  uint64_t seen = completed_total_.load();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const bool moved = progress_locked();
      auto it = jobs_.find(ticket);
      if (it == jobs_.end())
        throw Error(ErrorKind::kInvalidArgument, "submitter: ticket " + std::to_string(ticket) + " is unknown or already waited for");
      Job& j = it->second;
      if (j.completed == j.commands.size()) {
        const Job copy = j;
        jobs_.erase(it);
        if (copy.failed)
          throw Error(ErrorKind::kCommandFailed,
                      controller_.transport().name() + ": read of LBA " + std::to_string(copy.failed_slba) + ".." +
                          std::to_string(copy.failed_slba + copy.failed_nblocks - 1) + " (queue " +
                          std::to_string(queue_.qid()) + ") failed: " + nvme::describe(copy.failure.status),
                      copy.failure.status);
        return;
      }
      const auto now = std::chrono::steady_clock::now();
      const uint64_t total = completed_total_.load();
      if (moved || total != seen) {
        last_progress = now;
        seen = total;
      }
      if (now >= next_health) {
        controller_.check_fatal("waiting for streamed reads");
        next_health = now + std::chrono::milliseconds(1);
      }
      if (now - last_progress > options_.timeout) {
        // The commands will never complete: forget them so the queue can be reused.
        const size_t missing = j.commands.size() - j.completed;
        queue_.abandon_in_flight();
        in_flight_ = 0;
        for (auto& kv : jobs_) kv.second.next = kv.second.commands.size();
        pending_.clear();
        jobs_.erase(ticket);
        throw Error(ErrorKind::kTimeout, controller_.transport().name() + ": " + std::to_string(missing) +
                                             " streamed reads on queue " + std::to_string(queue_.qid()) +
                                             " got no completion within " + std::to_string(options_.timeout.count()) +
                                             " ms; the controller dropped them or hung (queue abandoned)");
      }
      if (moved) idle = 0;
    }
    if (++idle > 64) std::this_thread::yield();
  }
}

void CpuSubmitter::pump() {
  while (!stop_) {
    bool busy;
    {
      std::lock_guard<std::mutex> lock(mu_);
      progress_locked();
      busy = in_flight_ > 0 || !pending_.empty();
    }
    if (busy) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace gpunvme::stream
