// Kernels the GPU recovery suite needs, behind plain host functions: the retry rule evaluated on the
// GPU (to compare with the host's evaluation of the same driver/retry_policy.h).
#pragma once
#include <cstdint>
#include <vector>

#include "driver/retry_policy.h"
#include "driver/status.h"

namespace gpunvme::test {

struct RetryCase {
  nvme::Status status;
  uint32_t attempts = 1;  // submissions so far, the one that produced `status` included
};

// nvme::decide_retry(case.status, case.attempts, policy) for every case, computed by a GPU kernel;
// with after_timeout, nvme::decide_retry_after_timeout(case.attempts, policy) instead.
std::vector<nvme::RetryDecision> gpu_decide_retry(const std::vector<RetryCase>& cases, const nvme::RetryPolicy& policy,
                                                  bool after_timeout);

}  // namespace gpunvme::test
