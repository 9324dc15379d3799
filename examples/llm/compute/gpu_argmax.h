// The greedy pick on the GPU (greedy_pick.h's rule, issue 36): a one-token decode pass whose caller
// wants only the greedy token reduces its row of logits where the head wrote it and copies 8 bytes
// back, instead of copying the row (1 MiB for a 262k vocabulary) and scanning it on the host twice
// (the finiteness check and the argmax: ~0.2 ms a token for 262k, docs/performance.md §8).
#pragma once
#include <cstdint>

#include "examples/llm/compute/greedy_pick.h"

namespace gpunvme::llm {

using gpu_stream_t = struct CUstream_st*;

class GpuArgmax {
 public:
  GpuArgmax();  // on the current device: the blocks' partial results, their counter, the pinned result
  ~GpuArgmax();
  GpuArgmax(const GpuArgmax&) = delete;
  GpuArgmax& operator=(const GpuArgmax&) = delete;

  // Enqueues on `s` the pick of x[0..n) (device memory, n >= 1) and the copy of its 8 bytes to the
  // host: host() holds it once the stream has run that far. One launch: each block reduces a share,
  // the last block to finish reduces the blocks' results (and resets the counter for the next launch).
  // The reduction's order cannot change the answer: (value, index) is a total order.
  // `slot` (0 or 1): the pinned result it is copied to, and the event recorded after that copy, so
  // that a pass enqueued behind this one (a chained decode) cannot overwrite it before it is read.
  void enqueue(gpu_stream_t s, const float* x, uint32_t n, uint32_t slot = 0);
  const GreedyPick& host(uint32_t slot = 0) const { return host_[slot]; }
  // Waits (the thread sleeps: a blocking-sync event) for slot's copy; its result.
  GreedyPick wait(uint32_t slot);
  // Where the kernel writes the id (device memory): the next chained pass's token is copied from there.
  const uint32_t* device_id() const { return &result_->id; }

 private:
  float* part_value_ = nullptr;  // [kMaxBlocks]
  uint32_t* part_index_ = nullptr;
  uint32_t* part_bad_ = nullptr;
  uint32_t* counter_ = nullptr;  // blocks done (0 between launches)
  GreedyPick* result_ = nullptr;
  GreedyPick* host_ = nullptr;  // pinned, [2]
  struct CUevent_st* copied_[2] = {nullptr, nullptr};
};

}  // namespace gpunvme::llm
