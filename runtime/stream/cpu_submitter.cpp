#include "runtime/stream/cpu_submitter.h"

#include <algorithm>
#include <string>

namespace gpunvme::stream {
namespace {

host::RecoveryOptions recovery_options(const CpuSubmitterOptions& o) {
  host::RecoveryOptions r;
  r.retry = o.retry;
  r.timeout = o.timeout;
  r.abort_timeout = o.abort_timeout;
  return r;
}

}  // namespace

CpuSubmitter::CpuSubmitter(host::Controller& controller, host::QueuePair& queue, const CpuSubmitterOptions& options)
    : controller_(controller), queue_(queue), options_(options), rq_(controller, queue, recovery_options(options)) {
  const uint32_t max_depth = queue.entries() - 1;
  if (options_.queue_depth == 0 || options_.queue_depth > max_depth) options_.queue_depth = max_depth;
  if (options_.pump_thread) pump_ = std::thread([this] { pump(); });
}

CpuSubmitter::~CpuSubmitter() {
  stop_ = true;
  if (pump_.joinable()) pump_.join();
}

uint64_t CpuSubmitter::issue(std::span<const nvme::SubmissionEntry> commands) {
  if (commands.size() >= (size_t(1) << kIndexBits))
    throw Error(ErrorKind::kInvalidArgument, "submitter: " + std::to_string(commands.size()) +
                                                 " commands in one ticket; at most 16777215");
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t t = next_ticket_++;
  Job& j = jobs_[t];
  j.commands = commands;
  if (!fatal_.empty()) j.completed = commands.size();  // wait() reports the fatal error
  else if (!commands.empty()) pending_.push_back(t);
  progress_locked();
  return t;
}

// Recovery gave up: nothing more will complete. Every job ends now and every wait() throws `e`.
void CpuSubmitter::fail_all_locked(const Error& e) {
  fatal_ = e.what();
  fatal_kind_ = e.kind();
  for (auto& kv : jobs_) kv.second.completed = kv.second.next = kv.second.commands.size();
  pending_.clear();
}

bool CpuSubmitter::progress_locked() {
  if (!fatal_.empty()) return false;
  bool moved = false;
  host::Outcome batch[64];
  try {
    for (;;) {
      const uint32_t n = rq_.reap(batch, 64);
      for (uint32_t i = 0; i < n; ++i) {
        auto it = jobs_.find(batch[i].tag >> kIndexBits);
        if (it == jobs_.end()) continue;
        Job& j = it->second;
        ++j.completed;
        if (!batch[i].ok() && !j.failed) {
          j.failed = true;
          j.failure = batch[i];
          j.failed_index = size_t(batch[i].tag & ((uint64_t(1) << kIndexBits) - 1));
        }
      }
      completed_total_ += n;
      if (n > 0) moved = true;
      if (n < 64) break;
    }
    bool placed = false;
    while (!pending_.empty() && rq_.outstanding() < options_.queue_depth && rq_.free_slots() > 0) {
      const uint64_t t = pending_.front();
      Job& j = jobs_[t];
      while (j.next < j.commands.size() && rq_.outstanding() < options_.queue_depth && rq_.free_slots() > 0) {
        rq_.place(j.commands[j.next], (t << kIndexBits) | j.next);
        ++j.next;
        placed = true;
      }
      if (j.next == j.commands.size()) pending_.pop_front();
    }
    if (placed) {
      rq_.ring();
      moved = true;
    }
  } catch (const Error& e) {
    fail_all_locked(e);
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

host::RecoveryStats CpuSubmitter::recovery() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rq_.stats();
}

void CpuSubmitter::wait(uint64_t ticket) {
  // The recovering queue bounds every command (attempts x (timeout + abort + reset)); this outer
  // bound only catches a bug in it.
  const auto bound = (options_.timeout + options_.abort_timeout) * (options_.retry.max_attempts + 1) +
                     std::chrono::seconds(10);
  auto last_progress = std::chrono::steady_clock::now();
  uint32_t idle = 0;
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
        if (!fatal_.empty()) throw Error(fatal_kind_, fatal_);
        if (copy.failed) {
          const nvme::SubmissionEntry& e = copy.commands[copy.failed_index];
          const uint64_t slba = nvme::rw_slba(e);
          const std::string where = controller_.transport().name() + ": read of LBA " + std::to_string(slba) + ".." +
                                    std::to_string(slba + nvme::rw_nblocks(e) - 1) + " (queue " +
                                    std::to_string(queue_.qid()) + ")";
          const std::string tries = " after " + std::to_string(copy.failure.attempts) + " attempts";
          if (copy.failure.lost)
            throw Error(ErrorKind::kTimeout, where + " got no completion" + tries + " (each past the " +
                                                 std::to_string(options_.timeout.count()) + " ms timeout)");
          throw Error(ErrorKind::kCommandFailed,
                      where + " failed" + (copy.failure.attempts > 1 ? tries : "") + ": " +
                          nvme::describe(copy.failure.status),
                      copy.failure.status);
        }
        return;
      }
      const auto now = std::chrono::steady_clock::now();
      if (moved) last_progress = now;
      if (now - last_progress > bound)
        throw Error(ErrorKind::kTimeout, controller_.transport().name() + ": streamed reads on queue " +
                                             std::to_string(queue_.qid()) + " made no progress for " +
                                             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(bound).count()) +
                                             " s (recovery included); this is a bug");
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
      busy = rq_.outstanding() > 0 || !pending_.empty();
    }
    if (busy) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace gpunvme::stream
