// gpu_argmax.h: one block; each thread scans a strided share in index order (so it keeps its first
// largest), then the (value, index) pairs reduce by warp shuffles and across the block's warps, the
// larger value winning and the lower index on a tie.
#include "examples/llm/compute/gpu_argmax.h"

#include <cuda_runtime.h>

#include <cmath>

#include "device/cuda_check.h"

namespace gpunvme::llm {
namespace {

constexpr uint32_t kThreads = 256;

__device__ bool better(float a, uint32_t ai, float b, uint32_t bi) { return b > a || (b == a && bi < ai); }

__global__ void argmax_kernel(const float* v, uint32_t n, uint32_t* out) {
  float best = -INFINITY;
  uint32_t at = ~0u;
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
    if (v[i] > best) best = v[i], at = i;
  for (int o = 16; o > 0; o >>= 1) {
    const float b = __shfl_down_sync(0xffffffffu, best, o);
    const uint32_t bi = __shfl_down_sync(0xffffffffu, at, o);
    if (better(best, at, b, bi)) best = b, at = bi;
  }
  __shared__ float bv[kThreads / 32];
  __shared__ uint32_t bidx[kThreads / 32];
  if ((threadIdx.x & 31u) == 0) bv[threadIdx.x / 32] = best, bidx[threadIdx.x / 32] = at;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (uint32_t w = 1; w < kThreads / 32; ++w)
      if (better(best, at, bv[w], bidx[w])) best = bv[w], at = bidx[w];
    *out = at < n ? at : 0u;
  }
}

}  // namespace

void gpu_argmax(gpu_stream_t s, const float* v, uint32_t n, uint32_t* out) {
  argmax_kernel<<<1, kThreads, 0, reinterpret_cast<cudaStream_t>(s)>>>(v, n, out);
  device::check_cuda(cudaGetLastError(), "argmax kernel");
}

}  // namespace gpunvme::llm
