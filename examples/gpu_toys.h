// The examples' GPU side (CUDA builds): a toy compute kernel that checksums every tensor of a
// streamed layer, a toy router that picks top-k experts on the GPU, and a toy expert consumer that
// waits for each fetched expert's readiness and checksums its parts. The host computes the same
// checksums from the GGUF file and compares.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "example_model.h"
#include "runtime/stream/cuda_stream.h"
#include "runtime/stream/gpu_fetch_types.h"

namespace example {

struct ToyTensor {
  uint64_t offset;  // in the slot
  uint64_t bytes;
};

// sums[i] = toy_checksum of tensor i of the slot (sums zeroed by this call, on the stream).
void enqueue_layer_checksums(gpunvme::stream::cuda_stream_t s, const uint8_t* slot, const ToyTensor* tensors,
                             uint32_t n, uint64_t* sums);
// ids[0..k) = the k best-scoring experts of layer l at token t among those with has_parts[l * E + e].
void enqueue_router(gpunvme::stream::cuda_stream_t s, uint32_t* ids, uint32_t k, uint32_t t, uint32_t l,
                    uint32_t n_experts, const uint8_t* has_parts);
// For every fetched expert: wait for it (bounded), checksum part k and compare with
// expected[(l * E + expert) * 4 + k]; adds to *parts and, on a mismatch or a timeout, to *bad.
void enqueue_check_experts(gpunvme::stream::cuda_stream_t s, const gpunvme::stream::GpuFetchResult* result,
                           const gpunvme::stream::GpuFetchedExpert* experts, const uint8_t* scratch,
                           const uint64_t* expected, uint32_t l, uint32_t n_experts, unsigned long long* parts,
                           unsigned long long* bad);

// Device memory holding a copy of a host vector (or zeros), freed at scope end.
template <class T>
struct DeviceVec {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceVec(size_t count) : n(count) {
    if (cudaMalloc(reinterpret_cast<void**>(&p), sizeof(T) * (n ? n : 1)) != cudaSuccess ||
        cudaMemset(p, 0, sizeof(T) * (n ? n : 1)) != cudaSuccess)
      throw std::runtime_error("cudaMalloc of " + std::to_string(sizeof(T) * n) + " bytes failed");
  }
  explicit DeviceVec(const std::vector<T>& v) : DeviceVec(v.size()) {
    if (n && cudaMemcpy(p, v.data(), sizeof(T) * n, cudaMemcpyHostToDevice) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy to the GPU failed");
  }
  ~DeviceVec() { cudaFree(p); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  std::vector<T> get() const {
    std::vector<T> v(n);
    if (n && cudaMemcpy(v.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy from the GPU failed");
    return v;
  }
};

}  // namespace example
