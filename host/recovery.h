// What recovery from command faults costs, counted in one place for every CPU path (CpuIo, the
// streaming submitter, nvme_perf) and reported next to their throughput. Issue #15.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "driver/retry_policy.h"

namespace gpunvme::host {

struct RecoveryOptions {
  nvme::RetryPolicy retry = nvme::kDefaultRetryPolicy;  // error statuses with DNR clear, and lost commands
  std::chrono::milliseconds timeout{5000};       // a command without completion this long is aborted
  std::chrono::milliseconds abort_timeout{1000};  // an aborted command still without completion: controller reset
};

struct RecoveryStats {
  uint64_t retries = 0;          // resubmissions after an error status with DNR clear (or an abort)
  uint64_t timeouts = 0;         // commands past their deadline
  uint64_t aborts = 0;           // Abort commands sent
  uint64_t resets = 0;           // controller resets this path started
  uint64_t resubmitted = 0;      // commands submitted again after a reset (this path's or another's)
  uint64_t protocol_errors = 0;  // completions for command ids not in flight, ignored
  uint64_t failed = 0;           // commands given up: DNR set, attempts spent, or recovery impossible
  // Wall time lost: each timed-out command's wait until its Abort, the Abort, resets, and each
  // retry's wait for resubmission. Waits of commands in flight together are each counted.
  double seconds_lost = 0;

  bool any() const { return retries + timeouts + aborts + resets + resubmitted + protocol_errors + failed != 0; }
  RecoveryStats& operator+=(const RecoveryStats& o) {
    retries += o.retries;
    timeouts += o.timeouts;
    aborts += o.aborts;
    resets += o.resets;
    resubmitted += o.resubmitted;
    protocol_errors += o.protocol_errors;
    failed += o.failed;
    seconds_lost += o.seconds_lost;
    return *this;
  }
};

// {"retries":N,...,"seconds_lost":S}: the one JSON spelling of these counters.
std::string recovery_json(const RecoveryStats& s);
// "3 retries, 1 abort, 1 reset, 0.012 s lost" (only the counters that are not zero), or "none".
std::string recovery_text(const RecoveryStats& s);

}  // namespace gpunvme::host
