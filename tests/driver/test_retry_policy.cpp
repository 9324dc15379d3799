#include <catch2/catch_test_macros.hpp>

#include "driver/retry_policy.h"

using namespace gpunvme::nvme;

namespace {
constexpr Status kTransient = Status::make(sct::kMediaError, sc::kUnrecoveredReadError, false);
constexpr Status kPermanent = Status::make(sct::kGeneric, sc::kLbaOutOfRange, true);
}  // namespace

// The rule is constexpr: these hold at compile time, for host and device code alike.
static_assert(decide_retry(Status{}, 1).action == RetryAction::kDone);
static_assert(decide_retry(kPermanent, 1).action == RetryAction::kFinal);
static_assert(decide_retry(kTransient, 1).action == RetryAction::kRetry);

TEST_CASE("success completes, DNR set is final at once", "[driver][retry]") {
  CHECK(decide_retry(Status{}, 3).action == RetryAction::kDone);
  CHECK(decide_retry(Status{}, 3).backoff_ns == 0);
  const RetryDecision d = decide_retry(kPermanent, 1);
  CHECK(d.action == RetryAction::kFinal);
  CHECK(d.backoff_ns == 0);
}

TEST_CASE("DNR clear is retried until the attempts are spent", "[driver][retry]") {
  const RetryPolicy p{.max_attempts = 4, .backoff_base_ns = 1000, .backoff_cap_ns = 1'000'000};
  CHECK(decide_retry(kTransient, 1, p).action == RetryAction::kRetry);
  CHECK(decide_retry(kTransient, 2, p).action == RetryAction::kRetry);
  CHECK(decide_retry(kTransient, 3, p).action == RetryAction::kRetry);
  CHECK(decide_retry(kTransient, 4, p).action == RetryAction::kFinal);
  CHECK(decide_retry(kTransient, 9, p).action == RetryAction::kFinal);
  // max_attempts 1: no retries at all.
  const RetryPolicy once{.max_attempts = 1};
  CHECK(decide_retry(kTransient, 1, once).action == RetryAction::kFinal);
}

TEST_CASE("backoff doubles from the base and stops at the cap", "[driver][retry]") {
  const RetryPolicy p{.max_attempts = 100, .backoff_base_ns = 1000, .backoff_cap_ns = 5000};
  CHECK(decide_retry(kTransient, 1, p).backoff_ns == 1000);
  CHECK(decide_retry(kTransient, 2, p).backoff_ns == 2000);
  CHECK(decide_retry(kTransient, 3, p).backoff_ns == 4000);
  CHECK(decide_retry(kTransient, 4, p).backoff_ns == 5000);
  CHECK(decide_retry(kTransient, 99, p).backoff_ns == 5000);  // no overflow with many attempts
  // A huge cap: doubling never wraps around to a short wait.
  const RetryPolicy wide{.max_attempts = 200, .backoff_base_ns = 3, .backoff_cap_ns = UINT64_MAX};
  uint64_t prev = 0;
  for (uint32_t a = 1; a < 200; ++a) {
    const uint64_t w = retry_backoff_ns(wide, a);
    CHECK(w >= prev);
    prev = w;
  }
}

TEST_CASE("a timed-out command spends the same budget as a retryable error", "[driver][retry]") {
  const RetryPolicy p{.max_attempts = 3, .backoff_base_ns = 10, .backoff_cap_ns = 100};
  CHECK(decide_retry_after_timeout(1, p).action == RetryAction::kRetry);
  CHECK(decide_retry_after_timeout(1, p).backoff_ns == 10);
  CHECK(decide_retry_after_timeout(3, p).action == RetryAction::kFinal);
}

// The completion of a command the host aborted (CPU path: RecoveringQueue; GPU path: the watchdog's
// Abort, the warp's schedule_retry) is retried like a lost one: the same decision, one place.
TEST_CASE("an aborted command's completion (Abort Requested) is retried as a timed-out one", "[driver][retry]") {
  const RetryPolicy p{.max_attempts = 3, .backoff_base_ns = 10, .backoff_cap_ns = 100};
  const Status aborted = Status::make(sct::kGeneric, sc::kAbortRequested, false);
  for (uint32_t a = 1; a <= 4; ++a) {
    CHECK(decide_retry(aborted, a, p).action == decide_retry_after_timeout(a, p).action);
    CHECK(decide_retry(aborted, a, p).backoff_ns == decide_retry_after_timeout(a, p).backoff_ns);
  }
  CHECK(decide_retry(aborted, 1, p).action == RetryAction::kRetry);
}

TEST_CASE("the default policy is bounded and small", "[driver][retry]") {
  CHECK(kDefaultRetryPolicy.max_attempts >= 2);
  CHECK(kDefaultRetryPolicy.backoff_base_ns <= kDefaultRetryPolicy.backoff_cap_ns);
  // Worst case, every retry waiting its full backoff, stays well under a second.
  uint64_t total = 0;
  for (uint32_t a = 1; a < kDefaultRetryPolicy.max_attempts; ++a) total += retry_backoff_ns(kDefaultRetryPolicy, a);
  CHECK(total < 1'000'000'000ull);
}
