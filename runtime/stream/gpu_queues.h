// I/O queue pairs whose rings live in GPU-mapped DMA memory, for a stream::GpuSubmitter: the kernels
// write the submission entries and poll the completions themselves. Owned here (RAII: deleted from the
// controller when this goes), handed to the submitter as `raw`. Used by the engine's GPU executor and
// by the toy examples alike.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/controller.h"
#include "host/dma_memory.h"

namespace gpunvme::stream {

struct GpuQueues {
  std::vector<std::unique_ptr<host::QueuePair>> owned;
  std::vector<host::QueuePair*> raw;  // the same pairs, for GpuSubmitter

  // Up to n pairs with ids first_qid, first_qid + 1, ..., as many as the controller granted, each of
  // min(entries, the controller's maximum) entries.
  GpuQueues(host::Controller& c, uint16_t first_qid, uint32_t n, uint32_t entries) {
    host::DmaOptions mem;
    mem.gpu_mapped = true;
    for (uint32_t i = 0; i < n && first_qid + i <= c.io_queues_granted(); ++i) {
      owned.push_back(c.create_io_queue_pair(uint16_t(first_qid + i), std::min(entries, c.max_queue_entries()), mem));
      raw.push_back(owned.back().get());
    }
    if (raw.empty())
      throw std::runtime_error("no I/O queue for the GPU: the controller granted " + std::to_string(c.io_queues_granted()) +
                               " I/O queues and the GPU's start at id " + std::to_string(first_qid) +
                               " (ask for fewer CPU queues, or a controller that grants more)");
  }
};

}  // namespace gpunvme::stream
