// How far the host may enqueue a pass ahead of the GPU, in layers. The executor enqueues a whole pass
// without waiting; CUDA's queue of pending launches and stream waits is bounded, and past it a launch
// call blocks, spinning the CPU, until the GPU drains some. A fetched MoE layer enqueues a wait and a
// launch per slice of every expert part (up to 8 for a 33 MB Mixtral part): about 3,800 a Mixtral
// token, and the host spent 0.46 s of CPU a token spinning (session 10). Sleeping on a blocking-sync
// event of the layer `layers` back keeps the queue short and the host asleep, still `layers` ahead.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "device/cuda_check.h"

namespace gpunvme::llm {

class HostLead {
 public:
  explicit HostLead(uint32_t layers) : ev_(layers > 0 ? layers : 1, nullptr) {
    for (cudaEvent_t& e : ev_)
      device::check_cuda(cudaEventCreateWithFlags(&e, cudaEventBlockingSync | cudaEventDisableTiming), "host lead event");
  }
  ~HostLead() {
    for (cudaEvent_t e : ev_)
      if (e) cudaEventDestroy(e);
  }
  HostLead(const HostLead&) = delete;
  HostLead& operator=(const HostLead&) = delete;

  // Before enqueuing a layer: sleeps until the layer ev_.size() before it ended on the GPU.
  void before_layer() {
    if (n_ >= ev_.size()) device::check_cuda(cudaEventSynchronize(ev_[n_ % ev_.size()]), "waiting for the GPU to catch up");
  }
  // After enqueuing it on `s`.
  void after_layer(cudaStream_t s) {
    device::check_cuda(cudaEventRecord(ev_[n_ % ev_.size()], s), "host lead event");
    ++n_;
  }

 private:
  std::vector<cudaEvent_t> ev_;
  uint64_t n_ = 0;  // layers enqueued so far
};

}  // namespace gpunvme::llm
