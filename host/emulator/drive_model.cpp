// The drive pacing model: virtual channel clocks, service units, log-normal latency.
#include "host/emulator/drive_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpunvme::emu {
namespace {

constexpr double kZ99 = 2.3263478740408408;  // standard normal quantile of 0.99
constexpr double kMaxZ = 6.0;                // draws are clamped to +-6 standard deviations

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

DriveRng::DriveRng(uint64_t seed) {
  for (uint64_t& s : s_) s = splitmix64(seed);
}

uint64_t DriveRng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double DriveRng::uniform() {
  // 53 random bits, shifted by half a step so that 0 (whose log Box-Muller needs to avoid) never appears.
  return (double(next() >> 11) + 0.5) * 0x1.0p-53;
}

double DriveRng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double r = std::sqrt(-2.0 * std::log(uniform()));
  const double a = 2.0 * M_PI * uniform();
  spare_ = r * std::sin(a);
  has_spare_ = true;
  return r * std::cos(a);
}

LatencySampler::LatencySampler(uint64_t p50_ns, uint64_t p99_ns)
    : median_ns_(double(p50_ns)),
      sigma_(p50_ns > 0 && p99_ns > p50_ns ? std::log(double(p99_ns) / double(p50_ns)) / kZ99 : 0.0) {}

double LatencySampler::at_z(double z) const {
  if (median_ns_ <= 0) return 0;
  return median_ns_ * std::exp(sigma_ * std::clamp(z, -kMaxZ, kMaxZ));
}

double LatencySampler::sample_ns(DriveRng& rng) const {
  if (median_ns_ <= 0) return 0;
  if (sigma_ == 0) return median_ns_;
  return at_z(rng.normal());
}

DriveModel::DriveModel(const DriveParams& params, int64_t epoch_ns)
    : params_(params),
      epoch_ns_(epoch_ns),
      read_lat_(params.read_p50_ns, params.read_p99_ns),
      write_lat_(params.write_p50_ns, params.write_p99_ns),
      rng_(params.seed) {
  if (params_.read_bytes_per_s > 0) read_ns_per_byte_ = 1e9 / params_.read_bytes_per_s;
  if (params_.write_bytes_per_s > 0) write_ns_per_byte_ = 1e9 / params_.write_bytes_per_s;
  if (params_.read_iops > 0) read_ns_per_cmd_ = 1e9 / params_.read_iops;
  if (params_.write_iops > 0) write_ns_per_cmd_ = 1e9 / params_.write_iops;
  std::vector<int64_t> zeros(params_.parallelism, 0);
  units_ = decltype(units_)(std::greater<int64_t>(), std::move(zeros));
}

int64_t DriveModel::ticks_for(double ns) const {
  if (ns <= 0) return 0;
  const double t = std::ceil(ns * kTicksPerNs);
  // A price beyond the clock's range (a multi-year transfer) saturates rather than overflowing.
  return t >= double(std::numeric_limits<int64_t>::max() / 4) ? std::numeric_limits<int64_t>::max() / 4 : int64_t(t);
}

void DriveModel::admit(int64_t now_ns, std::span<const DriveRequest> reqs, std::span<DriveGrant> out) {
  const int64_t now = std::max<int64_t>(0, now_ns - epoch_ns_) * kTicksPerNs;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const DriveRequest& r = reqs[i];
    int64_t start = now;
    if (!units_.empty()) start = std::max(start, units_.top());
    int64_t finish = start;
    double lat_ns = 0;
    if (r.op != DriveOp::kOther) {
      const bool read = r.op == DriveOp::kRead;
      const double per_byte = read ? read_ns_per_byte_ : write_ns_per_byte_;
      const double per_cmd = read ? read_ns_per_cmd_ : write_ns_per_cmd_;
      if (per_byte > 0) {
        bw_free_ = std::max(bw_free_, start) + ticks_for(per_byte * double(r.bytes));
        finish = std::max(finish, bw_free_);
      }
      if (per_cmd > 0) {
        cmd_free_ = std::max(cmd_free_, start) + ticks_for(per_cmd);
        finish = std::max(finish, cmd_free_);
      }
      lat_ns = (read ? read_lat_ : write_lat_).sample_ns(rng_);
    } else {
      // No data: the read latency stands in for the controller's own work (a lookup, a cache flush).
      lat_ns = read_lat_.sample_ns(rng_);
    }
    const int64_t due = std::max(start + ticks_for(lat_ns), finish);
    if (!units_.empty()) {
      units_.pop();
      units_.push(due);
    }
    out[i] = DriveGrant{to_ns(start), to_ns(due)};
  }
}

DriveGrant DriveModel::admit_one(int64_t now_ns, DriveRequest r) {
  DriveGrant g;
  admit(now_ns, std::span<const DriveRequest>(&r, 1), std::span<DriveGrant>(&g, 1));
  return g;
}

double DriveModel::channel_floor_ns(uint64_t read_bytes, uint64_t read_commands, uint64_t write_bytes,
                                    uint64_t write_commands) const {
  // The two clocks run side by side: whichever is the busier bounds the time.
  const double bw = read_ns_per_byte_ * double(read_bytes) + write_ns_per_byte_ * double(write_bytes);
  const double cmd = read_ns_per_cmd_ * double(read_commands) + write_ns_per_cmd_ * double(write_commands);
  return std::max(bw, cmd);
}

}  // namespace gpunvme::emu
