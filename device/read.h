// GPU-initiated reads, host entry points: each launches one warp per queue of a DeviceQueueSet, the
// warps write the SQEs, ring the doorbells and reap the completions themselves; the call returns when
// the kernel ends (commands done, or a fault such as a timeout).
//
//   read_extents  a list of extents (LBA, block count, destination offset): a transformer layer.
//                 Extents are split by the per-command limit (MDTS); command g goes to warp g % queues.
//   gather_extents  extents picked by indices that live in GPU memory (MoE experts after routing):
//                 selection i of table[indices[i]] lands at dst_stride * i; an index past the
//                 table is reported as an invalid extent.
//   read_stream   `per_queue` fixed-size reads per queue over an LBA span (benchmarks, stress).
// PRPs come from the destination's bus addresses; lists for multi-page commands are computed on the
// GPU into the queue's per-command-id list area.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "device/device_queue.h"
#include "device/queue_set.h"
#include "driver/status.h"

namespace gpunvme::device {

struct ReadOptions {
  uint64_t timeout_ns = 2'000'000'000;  // no progress on a queue for this long ends its warp (%globaltimer)
  uint32_t depth = 0;                   // max commands in flight per queue; 0 = entries - 1
  uint32_t queues = 0;                  // use the first N queues of the set; 0 = all
};

struct ReadResult {
  uint64_t commands = 0;   // commands the request split into
  uint64_t submitted = 0;
  uint64_t completed = 0;  // valid completions (any status)
  uint64_t failed = 0;     // completions with an error status
  uint32_t faults = 0;     // fault:: bits of any queue
  double seconds = 0;      // slowest warp, first submission to last completion (%globaltimer)
  nvme::Status first_error{};  // first failed command's status (lowest queue that failed)
  uint16_t first_error_qid = 0;
  uint32_t first_error_tag = 0;  // read_extents: extent index; gather: selection index
  std::vector<QueueReport> per_queue;
  bool ok() const { return faults == 0 && failed == 0 && completed == commands; }
  std::string describe() const;
};

ReadResult read_extents(DeviceQueueSet& queues, const Extent* device_extents, uint32_t count, const DeviceBuffer& dst,
                        const ReadOptions& options = {});

ReadResult gather_extents(DeviceQueueSet& queues, const Extent* device_table, uint32_t table_count,
                          const uint32_t* device_indices, uint32_t count, uint64_t dst_stride, const DeviceBuffer& dst, const ReadOptions& options = {});

struct StreamSpec {
  uint64_t per_queue = 0;   // commands per queue
  uint32_t blocks = 1;      // per command
  uint64_t first_lba = 0;
  uint64_t span_blocks = 0; // LBAs cycle over [first_lba, first_lba + span_blocks)
  uint64_t slot_bytes = 0;  // destination: command id c of queue w writes slot (w * slots + c % slots)
  uint32_t slots = 1;       // power of two; with shared_dst all queues use slots 0..slots-1
  bool shared_dst = false;
};
ReadResult read_stream(DeviceQueueSet& queues, const StreamSpec& spec, const DeviceBuffer& dst,
                       const ReadOptions& options = {});

}  // namespace gpunvme::device
