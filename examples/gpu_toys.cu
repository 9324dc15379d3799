#include "gpu_toys.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace example {
namespace {

cudaStream_t cu(gpunvme::stream::cuda_stream_t s) { return reinterpret_cast<cudaStream_t>(s); }

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

__device__ uint64_t block_sum(const uint8_t* p, uint64_t n) {
  uint64_t s = 0;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    s += toy_term(p[i], i);
  return s;
}

__global__ void layer_checksums(const uint8_t* slot, const ToyTensor* t, uint32_t n, uint64_t* sums) {
  // The "compute": every byte of every tensor is read by the GPU, straight from the slot.
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t s = block_sum(slot + t[i].offset, t[i].bytes);
    if (s) atomicAdd(reinterpret_cast<unsigned long long*>(sums + i), static_cast<unsigned long long>(s));
  }
}

__global__ void router(uint32_t* ids, uint32_t k, uint32_t t, uint32_t l, uint32_t n_experts, const uint8_t* has) {
  if (threadIdx.x != 0) return;
  // Top-k by repeated selection (k and the expert count are small in a toy).
  for (uint32_t j = 0; j < k; ++j) {
    uint64_t best = 0;
    uint32_t best_e = ~0u;
    for (uint32_t e = 0; e < n_experts; ++e) {
      if (!has[uint64_t(l) * n_experts + e]) continue;
      bool taken = false;
      for (uint32_t q = 0; q < j; ++q) taken |= ids[q] == e;
      const uint64_t sc = toy_score(t, l, e, n_experts);
      if (!taken && (best_e == ~0u || sc > best || (sc == best && e > best_e))) {
        best = sc;
        best_e = e;
      }
    }
    ids[j] = best_e == ~0u ? ids[0] : best_e;
  }
}

__global__ void check_experts(const gpunvme::stream::GpuFetchResult* r, const gpunvme::stream::GpuFetchedExpert* ex,
                              const uint8_t* scratch, const uint64_t* expected, uint32_t l, uint32_t n_experts,
                              unsigned long long* parts, unsigned long long* bad) {
  __shared__ unsigned long long acc;
  __shared__ uint32_t ok;
  const uint32_t token = r->token;
  for (uint32_t d = 0; d < r->count; ++d) {
    if (threadIdx.x == 0) {
      // Per-expert readiness: this consumer starts on expert d as soon as its reads are in.
      long long spins = 0;
      ok = 1;
      while (*const_cast<const volatile uint32_t*>(&ex[d].ready) != token)
        if (++spins > (1ll << 30) || *const_cast<const volatile uint32_t*>(&ex[d].failed)) {
          ok = 0;
          break;
        }
      __threadfence_system();
    }
    __syncthreads();
    for (uint32_t k = 0; k < ex[d].part_count; ++k) {
      if (threadIdx.x == 0) acc = 0;
      __syncthreads();
      if (ok) {
        uint64_t s = 0;
        const uint8_t* p = scratch + ex[d].part_offset[k];
        for (uint64_t i = threadIdx.x; i < ex[d].part_bytes[k]; i += blockDim.x) s += toy_term(p[i], i);
        atomicAdd(&acc, static_cast<unsigned long long>(s));
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        atomicAdd(parts, 1ull);
        if (!ok || acc != expected[(uint64_t(l) * n_experts + ex[d].expert) * 4 + k]) atomicAdd(bad, 1ull);
      }
      __syncthreads();
    }
  }
}

}  // namespace

void enqueue_layer_checksums(gpunvme::stream::cuda_stream_t s, const uint8_t* slot, const ToyTensor* tensors,
                             uint32_t n, uint64_t* sums) {
  check(cudaMemsetAsync(sums, 0, sizeof(uint64_t) * n, cu(s)), "cudaMemsetAsync");
  layer_checksums<<<132, 256, 0, cu(s)>>>(slot, tensors, n, sums);
  check(cudaGetLastError(), "layer_checksums");
}

void enqueue_router(gpunvme::stream::cuda_stream_t s, uint32_t* ids, uint32_t k, uint32_t t, uint32_t l,
                    uint32_t n_experts, const uint8_t* has_parts) {
  router<<<1, 32, 0, cu(s)>>>(ids, k, t, l, n_experts, has_parts);
  check(cudaGetLastError(), "router");
}

void enqueue_check_experts(gpunvme::stream::cuda_stream_t s, const gpunvme::stream::GpuFetchResult* result,
                           const gpunvme::stream::GpuFetchedExpert* experts, const uint8_t* scratch,
                           const uint64_t* expected, uint32_t l, uint32_t n_experts, unsigned long long* parts,
                           unsigned long long* bad) {
  check_experts<<<1, 256, 0, cu(s)>>>(result, experts, scratch, expected, l, n_experts, parts, bad);
  check(cudaGetLastError(), "check_experts");
}

}  // namespace example
