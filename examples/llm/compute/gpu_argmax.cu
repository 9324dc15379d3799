#include "examples/llm/compute/gpu_argmax.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "device/cuda_check.h"

namespace gpunvme::llm {
namespace {

constexpr uint32_t kThreads = 256;
constexpr uint32_t kMaxBlocks = 264;  // two an SM of an H200; each block's share is a strided walk
constexpr uint32_t kPerThread = 8;    // values a thread takes at least before another block is worth it

// (v, i) comes before (bv, bi): a larger value, or the same value (+0 == -0) at a lower index. A NaN
// never does; (-inf, UINT32_MAX), the start, loses to every non-NaN value.
__device__ inline bool before(float v, uint32_t i, float bv, uint32_t bi) { return v > bv || (v == bv && i < bi); }

// The warp's best into lane 0 (every lane's `bad` ORed in).
__device__ inline void warp_best(float& bv, uint32_t& bi, uint32_t& bad) {
  for (uint32_t off = 16; off > 0; off /= 2) {
    const float v = __shfl_down_sync(0xffffffffu, bv, off);
    const uint32_t i = __shfl_down_sync(0xffffffffu, bi, off);
    bad |= __shfl_down_sync(0xffffffffu, bad, off);
    if (before(v, i, bv, bi)) bv = v, bi = i;
  }
}

// The block's best of (vals[j], idx[j]) for j < count, read by thread j, into thread 0.
__device__ inline void block_best(float& bv, uint32_t& bi, uint32_t& bad) {
  __shared__ float sv[kThreads / 32];
  __shared__ uint32_t si[kThreads / 32], sb[kThreads / 32];
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  warp_best(bv, bi, bad);
  if (lane == 0) sv[warp] = bv, si[warp] = bi, sb[warp] = bad;
  __syncthreads();
  if (warp == 0) {
    const bool has = lane < blockDim.x / 32;
    bv = has ? sv[lane] : -INFINITY, bi = has ? si[lane] : UINT32_MAX, bad = has ? sb[lane] : 0;
    warp_best(bv, bi, bad);
  }
}

__global__ void argmax_kernel(const float* x, uint32_t n, float* pv, uint32_t* pi, uint32_t* pb, uint32_t* counter,
                              GreedyPick* out) {
  float bv = -INFINITY;
  uint32_t bi = UINT32_MAX, bad = 0;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float v = x[i];
    bad |= isfinite(v) ? 0u : 1u;
    if (before(v, i, bv, bi)) bv = v, bi = i;
  }
  block_best(bv, bi, bad);
  __shared__ bool last;
  if (threadIdx.x == 0) {
    pv[blockIdx.x] = bv, pi[blockIdx.x] = bi, pb[blockIdx.x] = bad;
    __threadfence();  // the partial is visible before the count says so
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  bv = -INFINITY, bi = UINT32_MAX, bad = 0;
  for (uint32_t b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
    const float v = *static_cast<volatile float*>(pv + b);
    const uint32_t i = *static_cast<volatile uint32_t*>(pi + b);
    bad |= *static_cast<volatile uint32_t*>(pb + b);
    if (before(v, i, bv, bi)) bv = v, bi = i;
  }
  block_best(bv, bi, bad);
  if (threadIdx.x == 0) {
    // sampler.h's argmax: a NaN first leaves its running maximum NaN, and then no index matches: 0.
    // Otherwise a row with a non-NaN value has its first largest one; all NaN falls under the first case.
    out->id = isnan(x[0]) || bi == UINT32_MAX ? 0u : bi;
    out->non_finite = bad ? 1u : 0u;
    *counter = 0;  // the next launch (a graph's replay included) starts from 0
  }
}

template <class T>
T* device_alloc(uint64_t count) {
  void* p = nullptr;
  device::check_cuda(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc for the greedy pick");
  return static_cast<T*>(p);
}

}  // namespace

GpuArgmax::GpuArgmax() {
  part_value_ = device_alloc<float>(kMaxBlocks);
  part_index_ = device_alloc<uint32_t>(kMaxBlocks);
  part_bad_ = device_alloc<uint32_t>(kMaxBlocks);
  counter_ = device_alloc<uint32_t>(1);
  result_ = device_alloc<GreedyPick>(1);
  device::check_cuda(cudaMemset(counter_, 0, sizeof(uint32_t)), "greedy pick counter");
  device::check_cuda(cudaMallocHost(&host_, 2 * sizeof(GreedyPick)), "cudaMallocHost for the greedy pick");
  host_[0] = host_[1] = {};
  for (cudaEvent_t& e : copied_)
    device::check_cuda(cudaEventCreateWithFlags(&e, cudaEventBlockingSync | cudaEventDisableTiming), "greedy pick event");
}

GpuArgmax::~GpuArgmax() {
  for (void* p : {(void*)part_value_, (void*)part_index_, (void*)part_bad_, (void*)counter_, (void*)result_}) cudaFree(p);
  cudaFreeHost(host_);
  for (cudaEvent_t e : copied_)
    if (e) cudaEventDestroy(e);
}

void GpuArgmax::enqueue(gpu_stream_t stream, const float* x, uint32_t n, uint32_t slot) {
  if (slot > 1) throw std::logic_error("GpuArgmax: slot 0 or 1");
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  const uint32_t blocks = std::clamp<uint32_t>((n + kThreads * kPerThread - 1) / (kThreads * kPerThread), 1, kMaxBlocks);
  argmax_kernel<<<blocks, kThreads, 0, s>>>(x, n, part_value_, part_index_, part_bad_, counter_, result_);
  device::check_cuda(cudaGetLastError(), "greedy pick kernel");
  device::check_cuda(cudaMemcpyAsync(host_ + slot, result_, sizeof(GreedyPick), cudaMemcpyDeviceToHost, s), "greedy pick copy");
  device::check_cuda(cudaEventRecord(copied_[slot], s), "greedy pick event");
}

GreedyPick GpuArgmax::wait(uint32_t slot) {
  device::check_cuda(cudaEventSynchronize(copied_[slot]), "greedy pick");
  return host_[slot];
}

}  // namespace gpunvme::llm
