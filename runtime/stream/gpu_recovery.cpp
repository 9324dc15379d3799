#include "runtime/stream/gpu_recovery.h"

#include "device/queue_set.h"
#include "host/error.h"

namespace gpunvme::stream {

using Clock = std::chrono::steady_clock;

namespace {
const std::string kStallPrefix = "GPU queue ";
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
long long ms_of(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }
}  // namespace

GpuRecovery::GpuRecovery(host::Controller& controller, device::DeviceQueueSet& queues, const GpuRecoveryOptions& options)
    : controller_(controller), queues_(queues), options_(options), seen_(queues.size()) {
  can_reset_ = queues_.can_reset(nullptr);
}

void GpuRecovery::poll() {
  if (options_.stall_timeout.count() == 0 || !can_reset_ || !failure_.empty()) return;
  const Clock::time_point now = Clock::now();
  if (now < next_check_) return;
  next_check_ = now + options_.check_period;
  std::string why = stalled_queue(now);
  if (why.empty() && ++checks_ % 10 == 0) why = controller_failure();
  if (why.empty()) return;
  if (why.rfind(kStallPrefix, 0) == 0) stats_.stalls += 1;
  recover(why);
}

// A queue whose warp runs and whose progress word has not changed for stall_timeout.
std::string GpuRecovery::stalled_queue(Clock::time_point now) {
  for (uint32_t i = 0; i < queues_.size(); ++i) {
    const device::QueueHealth h = queues_.health(i);
    Seen& s = seen_[i];
    if (h.state != device::health_state::kRunning || h.progress != s.progress) {
      s.progress = h.progress;
      s.since = now;
      continue;
    }
    if (now - s.since > options_.stall_timeout)
      return kStallPrefix + std::to_string(i) + " made no progress for " + std::to_string(ms_of(now - s.since)) +
             " ms with " + std::to_string(h.in_flight) + " commands in flight (a lost or late completion)";
  }
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
  if (!can_reset_ || !failure_.empty()) return;
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
  for (Seen& s : seen_) s.since = Clock::now();
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
