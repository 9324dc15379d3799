#include "runtime/stream/gpu_recovery.h"

#include "device/queue_set.h"
#include "driver/commands.h"
#include "host/error.h"

namespace gpunvme::stream {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
long long ms_of(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }
}  // namespace

GpuRecovery::GpuRecovery(host::Controller& controller, device::DeviceQueueSet& queues, const GpuRecoveryOptions& options)
    : controller_(controller), queues_(queues), options_(options), seen_(queues.size()) {
  for (Seen& s : seen_) s.aborted = device::kNoOldest;
}

void GpuRecovery::poll() {
  if (options_.stall_timeout.count() == 0 || !failure_.empty()) return;
  const Clock::time_point now = Clock::now();
  if (now < next_check_) return;
  next_check_ = now + options_.check_period;
  std::string why;
  for (uint32_t i = 0; i < queues_.size() && why.empty() && failure_.empty(); ++i) why = check_queue(i, now);
  if (why.empty() && ++checks_ % 10 == 0) why = controller_failure();
  if (!why.empty()) recover(why);
}

// One queue's check: a running queue without progress for stall_timeout -> an Abort for its oldest
// command. Returns why to reset ("" for nothing): no progress abort_timeout after an Abort, or a
// stalled queue whose warp named no command to abort.
std::string GpuRecovery::check_queue(uint32_t i, Clock::time_point now) {
  const device::QueueHealth h = queues_.health(i);
  Seen& s = seen_[i];
  if (h.state != device::health_state::kRunning || h.progress != s.progress) {
    s.progress = h.progress;
    s.since = now;
    s.aborted = device::kNoOldest;  // progress: the aborted command was re-issued and went through
    return {};
  }
  auto queue = [&] { return "GPU queue " + std::to_string(i) + " (qid " + std::to_string(queues_.qid(i)) + ")"; };
  if (s.aborted != device::kNoOldest) {
    if (now < s.abort_by) return {};
    const uint16_t cid = device::oldest_cid(s.aborted);
    s.aborted = device::kNoOldest;
    return queue() + ": command id " + std::to_string(cid) + " still had no completion " +
           std::to_string(options_.abort_timeout.count()) + " ms after its Abort";
  }
  if (now - s.since <= options_.stall_timeout) return {};
  stats_.stalls += 1;
  const std::string why = queue() + " made no progress for " + std::to_string(ms_of(now - s.since)) + " ms with " +
                          std::to_string(h.in_flight) + " commands in flight (a lost or late completion)";
  const uint64_t oldest = queues_.ask_oldest(i, options_.ask_timeout);
  if (oldest == device::kNoOldest) return why + "; its warp named no command to abort";
  return abort_command(i, oldest, why, s.since);
}

// Sends the Admin Abort for queue i's oldest command; "" when the controller aborted it (its
// completion should follow), else why a reset is needed.
std::string GpuRecovery::abort_command(uint32_t i, uint64_t oldest, const std::string& why, Clock::time_point stalled_since) {
  Seen& s = seen_[i];
  const uint16_t cid = device::oldest_cid(oldest);
  stats_.aborts += 1;
  // Time lost, as the CPU path counts it: the wait since the queue stalled, then the Abort itself.
  struct Lost {
    GpuRecoveryStats& stats;
    Clock::time_point since;
    ~Lost() { stats.recovery_seconds += seconds_since(since); }
  } lost{stats_, stalled_since};
  try {
    const host::Completion a = controller_.admin_raw(nvme::make_abort(queues_.qid(i), cid), options_.abort_timeout);
    if (!a.ok()) return why + "; its Abort failed: " + nvme::describe(a.status);
    if (!nvme::abort_took_effect(a.dw0)) return why + "; the controller did not have it to abort";
  } catch (const Error& e) {
    return why + "; its Abort did not complete: " + e.what();
  }
  stats_.last_reason = why + "; aborted";
  s.aborted = oldest;
  s.abort_by = Clock::now() + options_.abort_timeout;
  return {};
}

std::string GpuRecovery::controller_failure() const {
  try {
    controller_.check_fatal("GPU-issued I/O");
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

void GpuRecovery::recover(const std::string& why) {
  if (!failure_.empty()) return;
  const Clock::time_point t0 = Clock::now();
  while (!recent_resets_.empty() && t0 - recent_resets_.front() > options_.reset_window) recent_resets_.pop_front();
  if (recent_resets_.size() >= options_.max_resets) {
    give_up(why + "; not resetting again: " + std::to_string(recent_resets_.size()) + " resets in the last " +
            std::to_string(options_.reset_window.count()) + " ms (max_resets)");
    return;
  }
  stats_.last_reason = why;
  try {
    if (!queues_.quiesce(options_.quiesce_timeout)) {
      give_up(why + "; a GPU warp did not park within " + std::to_string(options_.quiesce_timeout.count()) +
              " ms, so the controller was not reset under it");
      return;
    }
    controller_.reset(why);
    recent_resets_.push_back(t0);
    queues_.resume(true);
  } catch (const Error& e) {
    give_up(e.what());
    return;
  }
  stats_.resets += 1;
  stats_.recovery_seconds += seconds_since(t0);
  for (Seen& s : seen_) {
    s.since = Clock::now();
    s.aborted = device::kNoOldest;
  }
}

// The kernels parked (or about to claim a queue) end with fault::kControllerLost; so will later ones.
void GpuRecovery::give_up(const std::string& why) {
  failure_ = why;
  stats_.last_reason = why;
  try {
    queues_.quiesce(options_.quiesce_timeout);
    queues_.resume(false);
  } catch (const Error&) {
    // The kernels still end: by their park timeout or their own command timeout.
  }
}

}  // namespace gpunvme::stream
