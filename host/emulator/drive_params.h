// What a modeled drive is allowed to do: the parameters of DriveModel (drive_model.h), set by the
// `drive=` profile and the override keys of an "emu:" device string. Plain data, no behaviour, so the
// device-string parser can carry it without pulling in the model.
#pragma once
#include <cstdint>
#include <string>

namespace gpunvme::emu {

struct DriveParams {
  std::string name = "none";       // profile it came from ("none", "sn530", "pcie4", "pcie5"), for reports
  // Caps of the shared channel. 0 = no cap. Bytes are the command's data bytes (NLB x LBA size).
  double read_bytes_per_s = 0;
  double write_bytes_per_s = 0;
  double read_iops = 0;
  double write_iops = 0;
  // Service latency: log-normal, given by its median and 99th percentile (p99 == p50: fixed latency;
  // p50 == 0: none). Writes have their own (drives acknowledge writes from their cache).
  uint64_t read_p50_ns = 0;
  uint64_t read_p99_ns = 0;
  uint64_t write_p50_ns = 0;
  uint64_t write_p99_ns = 0;
  uint32_t parallelism = 0;        // commands in service at once; 0 = no limit
  uint64_t seed = 1;               // latency sampler seed: the same seed draws the same latencies

  // false: nothing is limited, the controller keeps its unpaced fast path.
  bool limits_anything() const {
    return read_bytes_per_s > 0 || write_bytes_per_s > 0 || read_iops > 0 || write_iops > 0 || read_p50_ns > 0 ||
           write_p50_ns > 0 || parallelism > 0;
  }
};

}  // namespace gpunvme::emu
