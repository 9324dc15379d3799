// gpu_cmd_rate's GPU path, the benchmark's own kernel: one warp per queue of a DeviceQueueSet runs
// device::warp_pump over `per_queue` fixed-size reads that it builds itself (LBAs cycling over a
// span, PRPs on the GPU into slots of one destination), so the figure is the pump's command rate:
// no templates to copy, no ticket record to fold. The runtime reads through stream::GpuSubmitter
// (runtime/stream/gpu_submitter.h); nvme_perf's GPU path (nvme_perf_gpu.cu) adds latency and time bounds.
#pragma once
#include <cstdint>
#include <string>

#include "device/device_queue.h"
#include "device/queue_set.h"

namespace gpunvme::bench {

struct StreamSpec {
  uint64_t per_queue = 0;   // commands per queue
  uint32_t blocks = 1;      // per command
  uint64_t first_lba = 0;
  uint64_t span_blocks = 0; // LBAs cycle over [first_lba, first_lba + span_blocks)
  uint64_t slot_bytes = 0;  // destination: command id c of queue w writes slot (w * slots + c % slots)
  uint32_t slots = 1;       // power of two; with shared_dst all queues use slots 0..slots-1
  bool shared_dst = false;
  uint32_t depth = 0;                   // max commands in flight per queue; 0 = entries - 1
  uint64_t timeout_ns = 2'000'000'000;  // no progress on a queue for this long ends its warp (%globaltimer)
};

struct StreamResult {
  uint64_t commands = 0;   // per_queue * queues
  uint64_t completed = 0;  // valid completions (any status)
  uint64_t failed = 0;     // completions with an error status
  uint32_t faults = 0;     // device::fault bits of any queue
  uint16_t first_error_status = 0;  // first failed command's status field (lowest queue that failed)
  uint16_t first_error_qid = 0;
  bool ok() const { return faults == 0 && failed == 0 && completed == commands; }
  std::string describe() const;
};

// Runs the reads on every queue of `queues` and waits for the kernel. Throws kInvalidArgument for a
// spec the queues or `dst` cannot serve, kIo when the kernel does not launch.
StreamResult read_stream(device::DeviceQueueSet& queues, const StreamSpec& spec, const device::DeviceBuffer& dst);

}  // namespace gpunvme::bench
