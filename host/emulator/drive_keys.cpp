// Device-string keys of the modeled drive, resolved onto a profile.
#include "host/emulator/drive_keys.h"

#include <charconv>

#include "host/emulator/config.h"
#include "host/emulator/drive_profiles.h"

namespace gpunvme::emu {
namespace {

// Bounds that keep every derived quantity finite and every modeled wait bounded.
constexpr double kMaxRate = 1e15;             // bytes/s or commands/s
constexpr uint64_t kMaxLatencyNs = 10'000'000'000ull;  // 10 s
constexpr uint64_t kMaxParallelism = 65536;

std::string str(std::string_view v) { return std::string(v); }

// The p99 that goes with a new p50 when only the p50 was given: the profile's tail shape is kept
// (p99/p50); with no profile latency the new latency is fixed.
uint64_t scaled_p99(uint64_t new_p50, uint64_t base_p50, uint64_t base_p99) {
  if (base_p50 == 0 || base_p99 <= base_p50) return new_p50;
  return uint64_t(double(new_p50) * double(base_p99) / double(base_p50) + 0.5);
}

bool resolve_latency(const char* p50_key, const char* p99_key, std::optional<uint64_t> p50,
                     std::optional<uint64_t> p99, uint64_t* out_p50, uint64_t* out_p99, std::string* error) {
  const uint64_t base_p50 = *out_p50, base_p99 = *out_p99;
  if (p50) {
    *out_p50 = *p50;
    *out_p99 = p99 ? *p99 : scaled_p99(*p50, base_p50, base_p99);
  } else if (p99) {
    *out_p99 = *p99;
  }
  if (*out_p50 == 0 && *out_p99 != 0) {
    *error = std::string(p99_key) + " needs " + p50_key + " (the median) as well";
    return false;
  }
  if (*out_p99 < *out_p50) {
    *error = std::string(p99_key) + "=" + std::to_string(*out_p99) + "ns is below " + p50_key + "=" +
             std::to_string(*out_p50) + "ns: the 99th percentile cannot be below the median";
    return false;
  }
  return true;
}

}  // namespace

bool DriveKeys::take(std::string_view key, std::string_view value, std::string* error) {
  const auto rate = [&](std::optional<double>& slot, const char* what) {
    double v = 0;
    if (!parse_rate(value, &v) || v > kMaxRate)
      *error = str(key) + "=" + str(value) + " is not a " + what + " such as 7G, 2.4G, 1.2M, 370k (0 = no cap)";
    else
      slot = v;
  };
  const auto latency = [&](std::optional<uint64_t>& slot) {
    uint64_t v = 0;
    if (!parse_duration_ns(value, &v) || v > kMaxLatencyNs)
      *error = str(key) + "=" + str(value) + " is not a latency such as 80us, 1.5ms, 900ns (at most 10s)";
    else
      slot = v;
  };
  const auto integer = [&](std::optional<uint64_t>& slot, uint64_t hi) {
    uint64_t v = 0;
    const auto r = std::from_chars(value.data(), value.data() + value.size(), v, 10);
    if (value.empty() || r.ec != std::errc() || r.ptr != value.data() + value.size() || v > hi)
      *error = str(key) + "=" + str(value) + " is not a number in 0.." + std::to_string(hi);
    else
      slot = v;
  };
  if (key == "drive") {
    if (!drive_profile(value))
      *error = "drive=" + str(value) + " is not a drive profile; valid: " + drive_profile_names();
    else
      profile_ = str(value);
  } else if (key == "bw") {
    rate(bw_, "read bandwidth in bytes/s");
  } else if (key == "wbw") {
    rate(wbw_, "write bandwidth in bytes/s");
  } else if (key == "iops") {
    rate(iops_, "read command rate");
  } else if (key == "wiops") {
    rate(wiops_, "write command rate");
  } else if (key == "lat") {
    latency(lat_);
  } else if (key == "lat99") {
    latency(lat99_);
  } else if (key == "wlat") {
    latency(wlat_);
  } else if (key == "wlat99") {
    latency(wlat99_);
  } else if (key == "par") {
    integer(par_, kMaxParallelism);
  } else if (key == "seed") {
    integer(seed_, UINT64_MAX);
  } else {
    return false;
  }
  return true;
}

bool DriveKeys::resolve(DriveParams* out, std::string* error) const {
  DriveParams p = *drive_profile(profile_.value_or("none"));
  const bool overridden = bw_ || wbw_ || iops_ || wiops_ || lat_ || lat99_ || wlat_ || wlat99_ || par_;
  if (overridden && p.name != "none") p.name += "+";  // reports show the profile was changed
  if (overridden && p.name == "none") p.name = "custom";
  if (bw_) p.read_bytes_per_s = *bw_;
  if (wbw_) p.write_bytes_per_s = *wbw_;
  if (iops_) p.read_iops = *iops_;
  if (wiops_) p.write_iops = *wiops_;
  if (par_) p.parallelism = uint32_t(*par_);
  if (seed_) p.seed = *seed_;
  if (!resolve_latency("lat", "lat99", lat_, lat99_, &p.read_p50_ns, &p.read_p99_ns, error)) return false;
  if (!resolve_latency("wlat", "wlat99", wlat_, wlat99_, &p.write_p50_ns, &p.write_p99_ns, error)) return false;
  *out = std::move(p);
  return true;
}

const char* DriveKeys::help() {
  return "drive=sn530|pcie4|pcie5|none, bw=/wbw= (bytes/s, decimal: 7G), iops=/wiops= (1.2M), "
         "lat=/lat99=/wlat=/wlat99= (80us), par=0..65536, seed=N";
}

}  // namespace gpunvme::emu
