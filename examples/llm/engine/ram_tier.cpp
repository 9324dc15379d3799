#include "examples/llm/engine/ram_tier.h"

#include <algorithm>

#include "device/cuda_check.h"

namespace gpunvme::llm {

RamTier::RamTier(const ModelOnDevice& m, std::vector<PackedRanges> layers, uint32_t depth, LoadCheck* check)
    : layers_(std::move(layers)) {
  for (const PackedRanges& r : layers_) {
    host_offset_.push_back(host_bytes_);
    host_bytes_ += r.bytes;
    slot_bytes_ = std::max(slot_bytes_, r.bytes);
  }
  device::check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&host_), std::max<uint64_t>(host_bytes_, 1), cudaHostAllocDefault),
                     "cudaHostAlloc for the RAM tier (lower --ram-budget)");
  for (size_t j = 0; j < layers_.size(); ++j)
    for (const PackedRanges::Piece& q : layers_[j].pieces) {
      uint8_t* dst = host_ + host_offset_[j] + q.at;
      if (check) check->read(q.begin, q.end - q.begin, dst);
      else read_model_bytes(m, q.begin, q.end - q.begin, dst);
    }
  device::check_cuda(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "RAM-tier copy stream");
  depth = std::clamp<uint32_t>(depth, 1, std::max<uint32_t>(1, uint32_t(layers_.size())));
  for (uint32_t b = 0; b < depth; ++b) {
    buffers_.push_back(nullptr);
    device::check_cuda(cudaMalloc(reinterpret_cast<void**>(&buffers_.back()), std::max<uint64_t>(slot_bytes_, 1)),
                       "cudaMalloc for the RAM tier's GPU buffers");
    ready_.push_back(nullptr);
    free_.push_back(nullptr);
    device::check_cuda(cudaEventCreateWithFlags(&ready_.back(), cudaEventDisableTiming), "RAM-tier event");
    device::check_cuda(cudaEventCreateWithFlags(&free_.back(), cudaEventDisableTiming), "RAM-tier event");
  }
  if (!layers_.empty())
    for (uint32_t b = 0; b < depth; ++b) begin_next();
}

RamTier::~RamTier() {
  if (copy_) cudaStreamSynchronize(copy_);
  for (cudaEvent_t e : ready_) cudaEventDestroy(e);
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
  for (uint8_t* p : buffers_) cudaFree(p);
  if (copy_) cudaStreamDestroy(copy_);
  cudaFreeHost(host_);
}

void RamTier::begin_next() {
  const size_t b = begun_ % buffers_.size(), j = begun_ % layers_.size();
  // A never-recorded free[b] (the first round) is no wait at all.
  device::check_cuda(cudaStreamWaitEvent(copy_, free_[b], 0), "RAM tier: copy waits for its buffer");
  device::check_cuda(cudaMemcpyAsync(buffers_[b], host_ + host_offset_[j], layers_[j].bytes, cudaMemcpyHostToDevice, copy_),
                     "RAM tier: copy to the GPU");
  device::check_cuda(cudaEventRecord(ready_[b], copy_), "RAM tier: copy done");
  copied_ += layers_[j].bytes;
  ++begun_;
}

WeightView RamTier::acquire(gpu_stream_t compute) {
  const size_t b = consumed_ % buffers_.size(), j = consumed_ % layers_.size();
  device::check_cuda(cudaStreamWaitEvent(compute, ready_[b], 0), "RAM tier: compute waits for its copy");
  return {buffers_[b], &layers_[j]};
}

void RamTier::release(gpu_stream_t compute) {
  const size_t b = consumed_ % buffers_.size();
  device::check_cuda(cudaEventRecord(free_[b], compute), "RAM tier: buffer free");
  ++consumed_;
  begin_next();
}

void RamTier::sync() {
  if (copy_) device::check_cuda(cudaStreamSynchronize(copy_), "RAM-tier copy stream");
}

uint64_t RamTier::bytes_per_token() const {
  uint64_t s = 0;
  for (const PackedRanges& r : layers_) s += r.bytes;
  return s;
}

}  // namespace gpunvme::llm
