// nvme_perf's two I/O paths behind one interface: the CPU path (nvme_perf.cpp, host threads) and the
// GPU path (nvme_perf_gpu.cu, one warp per queue running device::warp_pump). Both fill a DeviceResult
// per device with the same latency histogram (nvme_perf_math.h), so their numbers compare directly.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/nvme_perf_math.h"
#include "device/doorbell_mode.h"
#include "host/controller.h"
#include "host/queue_pair.h"
#include "host/recovery.h"

namespace gpunvme::perf {

// The workload, the same on every device.
struct Job {
  IoPattern pattern;            // LBAs, read/write choice (pattern.queues = queues per device)
  uint64_t bs = 0;              // bytes per command (pattern.blocks * LBA size)
  uint32_t lba_bytes = 0;
  uint32_t qd = 0;              // commands in flight per queue
  double seconds = 0;           // duration bound (used when per_queue_count == 0)
  uint64_t per_queue_count = 0; // count bound: commands per queue
  uint64_t timeout_ns = 0;      // no completion on a queue for this long: the queue stops with an error
  bool verify = false;          // check the stamp() of every read's first and last block; writes stamp
  uint64_t buffer_cap_bytes = 1ull << 30;  // DMA data buffer per device (GPU path: slots shared above it)
  device::DoorbellMode doorbell = device::DoorbellMode::kAuto;  // GPU path: who writes the doorbells
};

struct DeviceResult {
  std::string device;
  uint64_t ios = 0;            // successful commands
  uint64_t reads = 0;          // commands issued as reads / writes
  uint64_t writes = 0;
  uint64_t errors = 0;         // commands with an error status, or lost to a fault
  uint64_t bytes = 0;          // ios * bs
  uint64_t t_start_ns = 0;     // first submission / last completion, on the path's clock
  uint64_t t_end_ns = 0;       // (CPU: steady_clock; GPU: %globaltimer), for totals over devices
  std::vector<uint64_t> hist = std::vector<uint64_t>(hist::kBuckets, 0);  // latency of successful commands
  uint64_t lat_count = 0, lat_sum_ns = 0, lat_max_ns = 0;
  uint64_t verify_errors = 0;
  uint64_t untimed = 0;        // GPU path: successful commands left out of the latency histogram
  std::string first_verify_error;
  std::string first_error;     // text of the first failed command or fault; empty when none
  std::string faults;          // GPU path: device::describe_faults() of all queues ("" when none)
  uint32_t buffer_slots = 0;   // data slots per queue actually used
  uint64_t chunks = 0;         // GPU path: warp_pump calls summed over queues
  double controller_cpu_s = -1;  // emulator controller threads' CPU time in the window; -1: unknown
  std::string doorbell;        // GPU path: "gpu" or "cpu" as resolved (DeviceQueueSet::doorbell_mode)
  std::string doorbell_note;   // ... and why
  host::RecoveryStats recovery;  // retries, aborts, resets behind the figures (issue #15)
  double seconds() const { return t_end_ns > t_start_ns ? double(t_end_ns - t_start_ns) / 1e9 : 0; }
};

// One device as the GPU path gets it: queue pairs created GPU-mapped (DmaOptions::gpu_mapped).
struct GpuDevice {
  std::string name;
  host::Controller* controller = nullptr;
  std::vector<host::QueuePair*> queues;
  uint32_t nsid = 1;
};

// Whether this build has the GPU path, and whether it can run here (a CUDA GPU is present).
bool gpu_path_built();
bool gpu_path_usable(std::string* why);
// Initializes CUDA (context, runtime threads) before the devices are opened, so that the threads
// that appear while a device opens are the controller's own. Throws when the GPU path is unusable.
void gpu_init();

// Runs the job on every device at once (one kernel per device, a warp per queue). on_start runs just
// before the first launch, on_end right after the last kernel ended (the CPU-time window).
// Host waits are bounded: a kernel that makes no progress for timeout + 10 s ends the process with
// exit status 3 and a message (a running kernel cannot be cancelled).
std::vector<DeviceResult> run_gpu(const std::vector<GpuDevice>& devices, const Job& job,
                                  const std::function<void()>& on_start, const std::function<void()>& on_end);

}  // namespace gpunvme::perf
