#include "host/recovering_queue.h"

#include <algorithm>

#include "driver/commands.h"
#include "host/error.h"

namespace gpunvme::host {
namespace {

using Clock = RecoveringQueue::Clock;
constexpr Clock::time_point kNever{};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// What a command that never completed reports as its status.
constexpr nvme::Status kLostStatus = nvme::Status::make(nvme::sct::kGeneric, nvme::sc::kAbortRequested, false);

}  // namespace

RecoveringQueue::RecoveringQueue(Controller& controller, QueuePair& queue, const RecoveryOptions& options)
    : controller_(controller), queue_(queue), options_(options) {
  if (options_.retry.max_attempts == 0) options_.retry.max_attempts = 1;
  by_cid_.resize(queue.entries());
  generation_ = queue.generation();
  protocol_base_ = queue.protocol_errors();
  // Deadlines are checked a few times per timeout, never more often than every 100 us: the scan
  // walks the command table and reads CSTS (an MMIO read on real hardware).
  const auto step = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.timeout) / 16;
  scan_every_ = std::clamp<std::chrono::nanoseconds>(step, std::chrono::microseconds(100), std::chrono::milliseconds(10));
  now_ = Clock::now();
  next_scan_ = now_ + scan_every_;
}

uint32_t RecoveringQueue::free_slots() const {
  const uint32_t f = queue_.free_slots();
  return f > waiting_.size() ? f - uint32_t(waiting_.size()) : 0;
}

void RecoveringQueue::place(const nvme::SubmissionEntry& entry, uint64_t tag) {
  const uint16_t cid = queue_.take_cid();
  Cmd& c = by_cid_[cid];
  c.entry = entry;
  c.tag = tag;
  c.attempts = 1;
  c.live = true;
  c.seen = kNever;
  c.abort_by = kNever;
  queue_.place(cid, entry);
  ++outstanding_;
}

uint32_t RecoveringQueue::reap(Outcome* out, uint32_t max) {
  now_ = Clock::now();
  if (queue_.generation() != generation_) [[unlikely]] take_back_after_reset();
  uint32_t k = 0;
  while (!ready_.empty() && k < max) {
    out[k++] = ready_.back();
    ready_.pop_back();
  }
  Completion batch[64];
  const uint32_t n = queue_.poll(batch, std::min<uint32_t>(max - k, 64));
  for (uint32_t i = 0; i < n; ++i) {
    Cmd& c = by_cid_[batch[i].cid];
    c.live = false;
    if (batch[i].status.ok()) [[likely]] {
      out[k++] = Outcome{c.tag, batch[i].status, batch[i].dw0, c.attempts, false};
      continue;
    }
    if (deliver_error(c, batch[i], &out[k])) ++k;
  }
  outstanding_ -= k;
  if (k > 0) resets_without_progress_ = 0;
  if (queue_.protocol_errors() - protocol_base_ != stats_.protocol_errors) [[unlikely]]
    stats_.protocol_errors = queue_.protocol_errors() - protocol_base_;
  if (!waiting_.empty()) [[unlikely]] resubmit_due();
  if (now_ >= next_scan_) [[unlikely]] scan();
  return k;
}

// True when the outcome is final (written to *out); false when the command waits for a retry.
bool RecoveringQueue::deliver_error(Cmd& c, const Completion& done, Outcome* out) {
  const nvme::RetryDecision d = nvme::decide_retry(done.status, c.attempts, options_.retry);
  if (d.action == nvme::RetryAction::kRetry) {
    ++stats_.retries;
    Waiting w{c, now_ + std::chrono::nanoseconds(d.backoff_ns), now_};
    ++w.cmd.attempts;
    waiting_.push_back(w);
    return false;
  }
  ++stats_.failed;
  *out = Outcome{c.tag, done.status, done.dw0, c.attempts, c.abort_by != kNever};
  return true;
}

void RecoveringQueue::resubmit_due() {
  bool placed = false;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->not_before > now_ || queue_.free_slots() == 0) {
      ++it;
      continue;
    }
    const uint16_t cid = queue_.take_cid();
    Cmd& c = by_cid_[cid];
    c = it->cmd;
    c.live = true;
    c.seen = kNever;
    c.abort_by = kNever;
    queue_.place(cid, c.entry);
    stats_.seconds_lost += seconds(now_ - it->since);
    it = waiting_.erase(it);
    placed = true;
  }
  if (placed) queue_.ring_sq_doorbell();
}

void RecoveringQueue::scan() {
  next_scan_ = now_ + scan_every_;
  const nvme::Csts csts = controller_.csts();
  if (csts.device_gone()) device_removed();
  if (csts.cfs()) {
    reset_and_resubmit("CSTS.CFS (Controller Fatal Status) set");
    return;
  }
  std::string why;
  for (uint32_t cid = 0; cid < by_cid_.size(); ++cid) {
    Cmd& c = by_cid_[cid];
    if (!c.live) continue;
    if (c.seen == kNever) {
      c.seen = now_;
    } else if (c.abort_by != kNever) {
      if (now_ >= c.abort_by && why.empty())
        why = "command id " + std::to_string(cid) + " still had no completion after its Abort";
    } else if (now_ - c.seen > options_.timeout) {
      ++stats_.timeouts;
      abort_overdue(uint16_t(cid), c);
    }
  }
  if (!why.empty()) reset_and_resubmit(why);
}

void RecoveringQueue::abort_overdue(uint16_t cid, Cmd& c) {
  ++stats_.aborts;
  bool took = false;
  try {
    const Completion a = controller_.admin_raw(nvme::make_abort(queue_.qid(), cid), options_.abort_timeout);
    took = a.ok() && nvme::abort_took_effect(a.dw0);
  } catch (const Error& e) {
    if (controller_.device_removed()) device_removed();
    if (e.kind() != ErrorKind::kTimeout) {  // the controller is out of service
      abandon();
      throw;
    }
    // The admin queue is stuck too: the reset at the next scan recreates it.
  }
  // Aborted: its completion (Command Abort Requested, retried) should follow promptly. Not
  // aborted (the controller does not have it: a lost completion, a wrong CID): reset next scan.
  const auto t1 = Clock::now();
  c.abort_by = took ? t1 + options_.abort_timeout : t1;
  stats_.seconds_lost += seconds(t1 - c.seen);  // waiting out the timeout, then the Abort itself
}

void RecoveringQueue::reset_and_resubmit(const std::string& why) {
  const auto t0 = Clock::now();
  if (++resets_without_progress_ > options_.retry.max_attempts) {
    abandon();
    throw Error(ErrorKind::kControllerFatal,
                controller_.transport().name() + ": queue " + std::to_string(queue_.qid()) + ": " +
                    std::to_string(resets_without_progress_ - 1) +
                    " controller resets brought no completion; giving up (last cause: " + why + ")");
  }
  ++stats_.resets;
  std::vector<Cmd> again;
  for (Cmd& c : by_cid_) {
    if (!c.live) continue;
    c.live = false;
    again.push_back(c);
  }
  try {
    controller_.reset("queue " + std::to_string(queue_.qid()) + ": " + why);
  } catch (...) {
    abandon();
    throw;
  }
  generation_ = queue_.generation();
  const auto t1 = Clock::now();
  for (Cmd& c : again) {
    if (c.abort_by != kNever) {  // timed out: it spends an attempt; the others go again as they were
      if (nvme::decide_retry_after_timeout(c.attempts, options_.retry).action != nvme::RetryAction::kRetry) {
        ++stats_.failed;
        ready_.push_back(Outcome{c.tag, kLostStatus, 0, c.attempts, true});
        continue;
      }
      ++c.attempts;
    }
    ++stats_.resubmitted;
    waiting_.push_back(Waiting{c, t1, t1});
  }
  stats_.seconds_lost += seconds(t1 - t0);
  now_ = t1;
  resubmit_due();
}

// Another queue's recovery reset the controller: our queue was recreated empty under us.
void RecoveringQueue::take_back_after_reset() {
  generation_ = queue_.generation();
  for (Cmd& c : by_cid_) {
    if (!c.live) continue;
    c.live = false;
    ++stats_.resubmitted;
    waiting_.push_back(Waiting{c, now_, now_});
  }
}

void RecoveringQueue::device_removed() {
  const uint32_t lost = outstanding_;
  stats_.failed += lost;
  abandon();
  throw Error(ErrorKind::kControllerFatal, controller_.transport().name() +
                                               ": the device was removed (BAR0 reads all ones) with " +
                                               std::to_string(lost) + " commands outstanding on queue " +
                                               std::to_string(queue_.qid()) + "; no retry can succeed");
}

void RecoveringQueue::abandon() {
  queue_.abandon_in_flight();
  for (Cmd& c : by_cid_) c.live = false;
  waiting_.clear();
  ready_.clear();
  outstanding_ = 0;
}

}  // namespace gpunvme::host
