#include "host/recovery.h"

#include <cstdio>

namespace gpunvme::host {

std::string recovery_json(const RecoveryStats& s) {
  char b[320];
  std::snprintf(b, sizeof b,
                "{\"retries\":%llu,\"timeouts\":%llu,\"aborts\":%llu,\"resets\":%llu,\"resubmitted\":%llu,"
                "\"protocol_errors\":%llu,\"failed\":%llu,\"seconds_lost\":%.6f}",
                (unsigned long long)s.retries, (unsigned long long)s.timeouts, (unsigned long long)s.aborts,
                (unsigned long long)s.resets, (unsigned long long)s.resubmitted, (unsigned long long)s.protocol_errors,
                (unsigned long long)s.failed, s.seconds_lost);
  return b;
}

std::string recovery_text(const RecoveryStats& s) {
  if (!s.any()) return "none";
  std::string out;
  const auto add = [&](uint64_t n, const char* one, const char* many) {
    if (n == 0) return;
    if (!out.empty()) out += ", ";
    out += std::to_string(n) + " " + (n == 1 ? one : many);
  };
  add(s.retries, "retry", "retries");
  add(s.timeouts, "timeout", "timeouts");
  add(s.aborts, "abort", "aborts");
  add(s.resets, "reset", "resets");
  add(s.resubmitted, "resubmitted", "resubmitted");
  add(s.protocol_errors, "protocol error", "protocol errors");
  add(s.failed, "failed", "failed");
  char b[48];
  std::snprintf(b, sizeof b, ", %.3f s lost", s.seconds_lost);
  return out + b;
}

}  // namespace gpunvme::host
