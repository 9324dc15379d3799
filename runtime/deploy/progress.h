// A one-line progress display on stderr: bytes, percentage, rate, ETA, redrawn about 4 times a
// second with '\r' (so only where stderr is a terminal, or when asked with --progress).
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace gpunvme::deploy {

// Called with (bytes done, bytes total) as work proceeds; may be empty.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

class ProgressLine {
 public:
  ProgressLine(std::string label, bool enabled, FILE* out = stderr);
  ~ProgressLine();
  void update(uint64_t done, uint64_t total);  // throttled to ~4 redraws per second
  void finish();                               // final redraw and newline (only if anything was drawn)
  ProgressFn fn() {
    return [this](uint64_t d, uint64_t t) { update(d, t); };
  }

 private:
  void draw(uint64_t done, uint64_t total);
  std::string label_;
  bool enabled_;
  FILE* out_;
  bool drawn_ = false;
  uint64_t last_done_ = 0, last_total_ = 0, drawn_done_ = UINT64_MAX;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "12.3 MiB/s" style rate and "1:05" style durations, shared with the summary lines.
std::string rate_string(double bytes_per_second);
std::string duration_string(double seconds);

}  // namespace gpunvme::deploy
