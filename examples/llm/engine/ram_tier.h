// The RAM tier of the GPU executor: the dense bytes of the plan's RAM layers in pinned host memory,
// read once at start from the namespace (by the start's reader, model_reader.h, as resident layers
// are), and copied to the GPU for every token by DMA (cudaMemcpyAsync) on a stream of their own into one of `depth` GPU
// buffers. Copies run `depth` RAM layers ahead of the compute, across token boundaries (the layer
// order does not depend on the token), so they overlap the compute and the NVMe streaming:
//   copy stream:    wait free[b] -> copy layer j into buffer b -> record ready[b]
//   compute stream: wait ready[b] -> the layer's kernels -> record free[b]
// The host enqueues only; it never waits for a copy.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "examples/llm/engine/executor.h"

namespace gpunvme::llm {

class RamTier final : public LayerSource {
 public:
  // layers[j]: the file bytes of the j-th RAM layer, in layer order, packed as the GPU holds them. Reads
  // them all (bounded by the device's reads), through `check` when given (each piece CRC'd while the
  // next is read, load_check.h); allocates the pinned memory and depth buffers of the largest layer.
  RamTier(const ModelOnDevice& m, std::vector<PackedRanges> layers, uint32_t depth, LoadCheck* check = nullptr);
  ~RamTier() override;
  RamTier(const RamTier&) = delete;
  RamTier& operator=(const RamTier&) = delete;

  // The next RAM layer (in order, cyclic): makes `compute` wait for its copy and returns its view.
  WeightView acquire(gpu_stream_t compute) override;
  // Its buffer may be refilled once the kernels enqueued on `compute` so far ran; enqueues the next copy.
  void release(gpu_stream_t compute) override;
  // Waits for the copy stream (bounded by the copies enqueued).
  void sync() override;

  uint64_t host_bytes() const { return host_bytes_; }       // pinned, read once at start
  uint64_t device_bytes() const { return slot_bytes_ * buffers_.size(); }
  uint64_t bytes_per_token() const;
  uint64_t copied_bytes() const { return copied_; }         // enqueued copies so far
  uint32_t layers() const { return uint32_t(layers_.size()); }

 private:
  void begin_next();

  std::vector<PackedRanges> layers_;
  std::vector<uint64_t> host_offset_;  // of each layer's packed bytes in host_
  uint8_t* host_ = nullptr;            // pinned
  uint64_t host_bytes_ = 0, slot_bytes_ = 0, copied_ = 0;
  std::vector<uint8_t*> buffers_;      // device memory
  std::vector<cudaEvent_t> ready_, free_;
  cudaStream_t copy_ = nullptr;
  uint64_t begun_ = 0, consumed_ = 0;
};

}  // namespace gpunvme::llm
