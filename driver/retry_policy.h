// The one retry decision for a completed command, shared by the CPU path and the GPU pump.
// NVMe Base 2.0 section 4.6.1.1: a status with Do Not Retry (DNR) clear may succeed if the same
// command is submitted again; with DNR set it will not. The host bounds how often it tries and waits
// a little longer before each new try (a drive that is throttling or recovering a media error needs
// time, and resubmitting at once only spends command slots). Pure data and arithmetic, no clocks:
// the caller owns time, this header owns the rule.
#pragma once
#include <cstdint>

#include "driver/compiler.h"
#include "driver/status.h"

namespace gpunvme::nvme {

// How hard to try. POD so it can be copied into device memory as is.
struct RetryPolicy {
  uint32_t max_attempts = 5;              // submissions in all, the first one included (>= 1)
  uint32_t reserved = 0;                  // keeps the 64-bit fields aligned on host and device
  uint64_t backoff_base_ns = 20'000;      // wait before the second submission
  uint64_t backoff_cap_ns = 5'000'000;    // the wait doubles per attempt up to this
};
static_assert(sizeof(RetryPolicy) == 24, "RetryPolicy is copied to the device as is");

inline constexpr RetryPolicy kDefaultRetryPolicy{};

// What the caller does with a completion.
enum class RetryAction : uint8_t {
  kDone = 0,   // success: complete the command
  kRetry = 1,  // resubmit the same command after backoff_ns
  kFinal = 2,  // report the error: DNR set, or the attempts are spent
};

struct RetryDecision {
  RetryAction action = RetryAction::kDone;
  uint64_t backoff_ns = 0;  // only for kRetry
};

// Wait before submission number attempts_so_far + 1: base * 2^(attempts_so_far - 1), capped.
GPUNVME_HD constexpr uint64_t retry_backoff_ns(const RetryPolicy& p, uint32_t attempts_so_far) {
  uint64_t wait = p.backoff_base_ns < p.backoff_cap_ns ? p.backoff_base_ns : p.backoff_cap_ns;
  for (uint32_t i = 1; i < attempts_so_far && wait < p.backoff_cap_ns; ++i) {
    wait = wait > p.backoff_cap_ns / 2 ? p.backoff_cap_ns : wait * 2;  // never wraps
  }
  return wait;
}

// attempts_so_far: how many times this command has been submitted, the one that produced
// `status` included (1 after the first completion).
GPUNVME_HD constexpr RetryDecision decide_retry(Status status, uint32_t attempts_so_far,
                                                const RetryPolicy& p = kDefaultRetryPolicy) {
  if (status.ok()) return {RetryAction::kDone, 0};
  if (status.dnr() || attempts_so_far >= p.max_attempts) return {RetryAction::kFinal, 0};
  return {RetryAction::kRetry, retry_backoff_ns(p, attempts_so_far)};
}

// A command the host gave up waiting for (timed out, aborted by us, or lost in a controller reset)
// counts as one attempt with a retryable outcome: the same budget, the same backoff.
GPUNVME_HD constexpr RetryDecision decide_retry_after_timeout(uint32_t attempts_so_far,
                                                              const RetryPolicy& p = kDefaultRetryPolicy) {
  return decide_retry(Status::make(sct::kGeneric, sc::kAbortRequested, false), attempts_so_far, p);
}

}  // namespace gpunvme::nvme
