// Routing kernels (gpu_route.h). The one-thread kernel was the engine's until it showed up as about
// 250 µs of every Qwen3-30B-A3B layer (128 experts, top 8: 1,024 exponentials in a dependent chain);
// the warp kernel does the same arithmetic spread over 32 lanes.
#include "examples/llm/compute/gpu_route.h"

#include <cuda_runtime.h>

#include <cmath>

#include "device/cuda_check.h"

namespace gpunvme::llm {
namespace {

__global__ void route_serial_kernel(const float* logits, uint32_t n_expert, uint32_t k, uint32_t* ids, float* weights) {
  float mx = -INFINITY;
  for (uint32_t e = 0; e < n_expert; ++e) mx = fmaxf(mx, logits[e]);
  float sum = 0.0f;
  for (uint32_t e = 0; e < n_expert; ++e) sum += expf(logits[e] - mx);
  uint64_t taken[kMaxRoutedExperts / 64] = {};
  float wsum = 0.0f;
  for (uint32_t j = 0; j < k; ++j) {
    uint32_t best = 0;
    float bp = -1.0f;
    for (uint32_t e = 0; e < n_expert; ++e) {
      if (taken[e / 64] >> (e % 64) & 1) continue;
      const float p = expf(logits[e] - mx) / sum;
      if (p > bp) { bp = p; best = e; }
    }
    taken[best / 64] |= 1ull << (best % 64);
    ids[j] = best;
    weights[j] = bp;
    wsum += bp;
  }
  for (uint32_t j = 0; j < k; ++j) weights[j] /= wsum;
}

// The serial kernel's values, step for step:
//   mx   a max reduction (fmaxf is exact and order-free, NaN ignored either way);
//   sum  lane 0 adds the exponentials in expert order, as the serial loop does;
//   p    each expert's expf(logit - mx) / sum, the serial expression;
//   pick each lane keeps the first strict maximum of its own experts (ascending), the warp keeps the
//        larger p and, on equal p, the lower id: the serial scan's first strict maximum. No expert with
//        p > -1 (all taken, or NaN) leaves best = 0 and bp = -1, as the serial scan does.
__global__ void route_warp_kernel(const float* logits, uint32_t n_expert, uint32_t k, uint32_t* ids, float* weights) {
  __shared__ float ex[kMaxRoutedExperts];
  __shared__ float sum_s;
  const uint32_t lane = threadIdx.x;
  float mx = -INFINITY;
  for (uint32_t e = lane; e < n_expert; e += 32) mx = fmaxf(mx, logits[e]);
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  for (uint32_t e = lane; e < n_expert; e += 32) ex[e] = expf(logits[e] - mx);
  __syncwarp();
  if (lane == 0) {
    float sum = 0.0f;
    for (uint32_t e = 0; e < n_expert; ++e) sum += ex[e];
    sum_s = sum;
  }
  __syncwarp();
  const float sum = sum_s;
  for (uint32_t e = lane; e < n_expert; e += 32) ex[e] = expf(logits[e] - mx) / sum;
  __syncwarp();
  uint64_t taken[kMaxRoutedExperts / 64] = {};
  float wsum = 0.0f;
  for (uint32_t j = 0; j < k; ++j) {
    uint32_t best = UINT32_MAX;
    float bp = -1.0f;
    for (uint32_t e = lane; e < n_expert; e += 32) {
      if (taken[e / 64] >> (e % 64) & 1) continue;
      const float p = ex[e];
      if (p > bp) { bp = p; best = e; }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float op = __shfl_xor_sync(0xffffffffu, bp, o);
      const uint32_t ob = __shfl_xor_sync(0xffffffffu, best, o);
      if (op > bp || (op == bp && ob < best)) { bp = op; best = ob; }
    }
    if (best == UINT32_MAX) best = 0;  // nothing above -1: the serial scan's default
    taken[best / 64] |= 1ull << (best % 64);
    if (lane == 0) {
      ids[j] = best;
      weights[j] = bp;
    }
    wsum += bp;
  }
  __syncwarp();
  if (lane == 0)
    for (uint32_t j = 0; j < k; ++j) weights[j] /= wsum;
}

}  // namespace

void gpu_route(gpu_stream_t s, const float* logits, uint32_t n_expert, uint32_t k, uint32_t* ids, float* weights) {
  route_warp_kernel<<<1, 32, 0, s>>>(logits, n_expert, k, ids, weights);
  device::check_cuda(cudaGetLastError(), "routing kernel");
}

void gpu_route_serial(gpu_stream_t s, const float* logits, uint32_t n_expert, uint32_t k, uint32_t* ids, float* weights) {
  route_serial_kernel<<<1, 1, 0, s>>>(logits, n_expert, k, ids, weights);
  device::check_cuda(cudaGetLastError(), "routing kernel");
}

}  // namespace gpunvme::llm
