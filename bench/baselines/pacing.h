// Modeled drives for bench/layer_stream: the emulator's drive model (host/emulator/drive_model.h,
// `drive=NAME` in an "emu:" device string) used (a) to compute a modeled drive's limit for
// layer-sized sequential reads and (b) to pace the baselines' reads like that drive.
//
// Pacing: before moving `bytes` of drive d, a reader asks admit() for the request's due time (the
// model's bandwidth, IOPS, latency and parallelism clocks, exactly as the emulator's controller
// threads do per command), moves the bytes, then wait_until(due).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if __has_include("host/emulator/drive_model.h") && __has_include("host/emulator/drive_profiles.h")
#include "host/emulator/drive_model.h"
#include "host/emulator/drive_profiles.h"
#define GPUNVME_LS_HAVE_DRIVE_MODEL 1
#else
#define GPUNVME_LS_HAVE_DRIVE_MODEL 0
#endif

namespace gpunvme::bench::ls {

using Clock = std::chrono::steady_clock;

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// Sleeps most of the way, spins the rest (sleep granularity is ~50-100 us).
inline void wait_until_ns(int64_t due_ns) {
  for (;;) {
    const int64_t left = due_ns - now_ns();
    if (left <= 0) return;
    if (left > 200'000)
      std::this_thread::sleep_for(std::chrono::nanoseconds(left - 100'000));
    else
      std::this_thread::yield();
  }
}

// Names of the profiles this tree models ("none" only when the drive model is absent).
inline std::string drive_profile_names() {
#if GPUNVME_LS_HAVE_DRIVE_MODEL
  return emu::drive_profile_names();
#else
  return "none (this tree has no host/emulator/drive_model.h)";
#endif
}

inline bool drive_profile_known(const std::string& name) {
#if GPUNVME_LS_HAVE_DRIVE_MODEL
  return emu::drive_profile(name).has_value();
#else
  return name == "none";
#endif
}

// Rated sequential read bandwidth of a profile in bytes/s; 0 = unlimited ("none").
inline double drive_read_bandwidth(const std::string& name) {
#if GPUNVME_LS_HAVE_DRIVE_MODEL
  auto p = emu::drive_profile(name);
  return p ? p->read_bytes_per_s : 0;
#else
  (void)name;
  return 0;
#endif
}

// The modeled drive's limit for reading `bytes` in `commands` commands (bytes/s): bytes divided by
// the model's channel floor (the least time its bandwidth and IOPS clocks allow). 0 = unlimited.
inline double modeled_limit_bps(const std::string& name, uint64_t bytes, uint64_t commands) {
#if GPUNVME_LS_HAVE_DRIVE_MODEL
  auto p = emu::drive_profile(name);
  if (!p || !p->limits_anything()) return 0;
  emu::DriveModel m(*p, 0);
  const double ns = m.channel_floor_ns(bytes, commands, 0, 0);
  return ns > 0 ? double(bytes) / (ns * 1e-9) : 0;
#else
  (void)name;
  (void)bytes;
  (void)commands;
  return 0;
#endif
}

class Pacer {
 public:
  // One model per drive, like one per emulated controller. Throws std::runtime_error for an unknown
  // profile or a tree without the drive model.
  Pacer(const std::string& profile, uint32_t drives)
      : profile_(profile), admitted_(std::make_unique<std::atomic<uint64_t>[]>(drives)), drives_(drives) {
#if GPUNVME_LS_HAVE_DRIVE_MODEL
    auto p = emu::drive_profile(profile);
    if (!p) throw std::runtime_error("unknown drive profile '" + profile + "' (" + drive_profile_names() + ")");
    add_models(*p);
#else
    (void)drives;
    throw std::runtime_error("cannot pace reads like drive '" + profile +
                             "': this tree has no host/emulator/drive_model.h");
#endif
  }
#if GPUNVME_LS_HAVE_DRIVE_MODEL
  // The same for a drive given by its parameters: a profile with the emulator's overrides (bw=, lat=,
  // ...) applied, e.g. an emulated controller's own (EmulatedController::drive_model()->params()), so that
  // a baseline paces exactly the drive the controller models.
  Pacer(const emu::DriveParams& params, uint32_t drives)
      : profile_(params.name), admitted_(std::make_unique<std::atomic<uint64_t>[]>(drives)), drives_(drives) {
    add_models(params);
  }
#endif
  const std::string& profile() const { return profile_; }
  // Due time (steady_clock ns) of a read of `bytes` of drive d starting now.
  int64_t admit(uint32_t drive, uint64_t bytes) {
#if GPUNVME_LS_HAVE_DRIVE_MODEL
    const int64_t now = now_ns();
    admitted(drive).fetch_add(bytes, std::memory_order_relaxed);
    return models_.at(drive)->admit_one(now, emu::DriveRequest{emu::DriveOp::kRead, bytes}).due_ns;
#else
    (void)drive;
    (void)bytes;
    return 0;
#endif
  }
  // Bytes drive d was asked to move so far (every admit()): what it served, as an emulated controller's
  // Stats::bytes_read counts (bench/llm_tokens' bound for its mmap cells). Any thread.
  uint64_t admitted_bytes(uint32_t drive) const { return admitted(drive).load(std::memory_order_relaxed); }
  uint32_t drives() const { return drives_; }

 private:
#if GPUNVME_LS_HAVE_DRIVE_MODEL
  // One model per drive, each seeded apart (their latencies independent, as separate drives').
  void add_models(const emu::DriveParams& p) {
    for (uint32_t d = 0; d < drives_; ++d) {
      emu::DriveParams q = p;
      q.seed = p.seed + d;
      models_.push_back(std::make_unique<emu::DriveModel>(q, now_ns()));
    }
  }
#endif
  std::atomic<uint64_t>& admitted(uint32_t drive) const {
    if (drive >= drives_) throw std::out_of_range("Pacer: drive " + std::to_string(drive) + " of " + std::to_string(drives_));
    return admitted_[drive];
  }
  std::string profile_;
  std::unique_ptr<std::atomic<uint64_t>[]> admitted_;  // per drive
  uint32_t drives_;
#if GPUNVME_LS_HAVE_DRIVE_MODEL
  std::vector<std::unique_ptr<emu::DriveModel>> models_;
#endif
};

}  // namespace gpunvme::bench::ls
