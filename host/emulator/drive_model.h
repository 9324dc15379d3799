// Pacing model of a real drive for the emulated controller: one per controller, shared by all its I/O
// threads. A controller thread moves a command's data at once, asks admit() for the command's due
// time, and posts the CQE no earlier than that. The model is pure bookkeeping on virtual clocks (no
// sleeping, no threads), so it is also testable without a controller: times are passed in.
//
// For each command, in admission order:
//   start  = max(now, the earliest time one of the `parallelism` service units is free)
//   finish = the end of its slot on the shared channel: a bandwidth clock (bytes / bytes_per_s) and an
//            IOPS clock (1 / iops), each advanced from max(itself, start), never banking idle time
//   due    = max(start + sampled latency, finish); the service unit is busy until `due`
// So N bytes at B bytes/s never complete in less than N/B after the first one started, small commands
// are latency-bound until IOPS or parallelism caps them, and large ones are bandwidth-bound.
// Reads and writes share both clocks, each paying its own direction's price.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <queue>
#include <span>
#include <vector>

#include "host/emulator/drive_params.h"

namespace gpunvme::emu {

// Deterministic generator (xoshiro256**, seeded through splitmix64) with standard normal variates.
// Not std::normal_distribution: its output differs between standard libraries, and a seed should
// draw the same latencies everywhere.
class DriveRng {
 public:
  explicit DriveRng(uint64_t seed);
  uint64_t next();
  double uniform();  // in (0, 1)
  double normal();   // mean 0, standard deviation 1 (Box-Muller, second value cached)

 private:
  uint64_t s_[4];
  double spare_ = 0;
  bool has_spare_ = false;
};

// Log-normal latency given by its median and 99th percentile. Draws are clamped to 6 standard
// deviations (about 1 in 10^9 beyond), so one unlucky draw cannot stall a queue without bound.
class LatencySampler {
 public:
  LatencySampler() = default;  // always 0
  LatencySampler(uint64_t p50_ns, uint64_t p99_ns);
  double sample_ns(DriveRng& rng) const;
  double at_z(double z) const;  // the latency at standard normal quantile z (clamped like a draw)
  bool zero() const { return median_ns_ <= 0; }

 private:
  double median_ns_ = 0;
  double sigma_ = 0;
};

enum class DriveOp : uint8_t {
  kRead,
  kWrite,
  kOther,  // Flush, Write Zeroes, failed commands: latency and a service unit, no channel time
};

struct DriveRequest {
  DriveOp op = DriveOp::kRead;
  uint64_t bytes = 0;
};

// Times in nanoseconds on the caller's clock (steady_clock in the controller).
struct DriveGrant {
  int64_t start_ns = 0;  // when a service unit took the command
  int64_t due_ns = 0;    // the CQE may not be posted before this
};

class DriveModel {
 public:
  // `epoch_ns`: a time on the caller's clock no later than any `now` passed to admit().
  DriveModel(const DriveParams& params, int64_t epoch_ns);
  DriveModel(const DriveModel&) = delete;
  DriveModel& operator=(const DriveModel&) = delete;

  // Admits reqs[i] at `now_ns`, in order, writing out[i]. Thread-safe; one lock per call, so callers
  // admit a fetched batch at once. out.size() must be >= reqs.size().
  void admit(int64_t now_ns, std::span<const DriveRequest> reqs, std::span<DriveGrant> out);
  DriveGrant admit_one(int64_t now_ns, DriveRequest r);

  const DriveParams& params() const { return params_; }

  // The least time `bytes` of reads (writes) and `commands` reads (writes) occupy the channel: the
  // floor no workload can beat, in nanoseconds. Used by tests and for the modeled limits in reports.
  double channel_floor_ns(uint64_t read_bytes, uint64_t read_commands, uint64_t write_bytes,
                          uint64_t write_commands) const;

 private:
  // Virtual clocks count 1/64 ns ticks from the epoch: exact integer ordering, sub-ns costs (4 KiB at
  // 14.7 GB/s is 279 ns), and 2^63 ticks last 4.5 years.
  static constexpr int64_t kTicksPerNs = 64;
  int64_t ticks_for(double ns) const;  // rounded up: the model may be slower than exact, never faster
  int64_t to_ns(int64_t ticks) const { return epoch_ns_ + (ticks + kTicksPerNs - 1) / kTicksPerNs; }

  const DriveParams params_;
  const int64_t epoch_ns_;
  // Per-direction prices, in ns (0 = free).
  double read_ns_per_byte_ = 0, write_ns_per_byte_ = 0, read_ns_per_cmd_ = 0, write_ns_per_cmd_ = 0;
  LatencySampler read_lat_, write_lat_;

  std::mutex mu_;  // guards everything below
  DriveRng rng_;
  int64_t bw_free_ = 0;   // ticks: the bandwidth clock
  int64_t cmd_free_ = 0;  // ticks: the IOPS clock
  // Times at which each service unit becomes free (min-heap), `parallelism` entries; empty = no limit.
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> units_;
};

}  // namespace gpunvme::emu
