// Routing kernels (gpu_route.h) over compute/route.h's route_top_k, the CPU backend's routing too. The
// one-thread kernel was the engine's until it showed up as about 250 µs of every Qwen3-30B-A3B layer
// (128 experts, top 8: 1,024 exponentials in a dependent chain); the warp kernel spreads the same
// arithmetic over 32 lanes.
#include "examples/llm/compute/gpu_route.h"

#include <cuda_runtime.h>

#include "device/cuda_check.h"
#include "examples/llm/compute/gpu_route_lanes.cuh"
#include "examples/llm/compute/route.h"

namespace gpunvme::llm {
namespace {

__global__ void route_serial_kernel(const float* logits, uint32_t n_expert, uint32_t k, Gating gating, uint32_t* ids,
                                    float* weights) {
  __shared__ float p[kMaxRoutedExperts];
  route_top_k(OneLane{}, logits, n_expert, k, gating, p, ids, weights);
}

__global__ void route_warp_kernel(const float* logits, uint32_t n_expert, uint32_t k, Gating gating, uint32_t* ids,
                                  float* weights) {
  __shared__ float p[kMaxRoutedExperts];
  route_top_k(gpu::WarpLanes{}, logits, n_expert, k, gating, p, ids, weights);
}

// Token blockIdx.x of a pass: the same warp routine on its own logits and routing slot.
__global__ void route_tokens_kernel(const float* logits, uint32_t n_expert, uint32_t k, Gating gating, uint32_t* routes) {
  __shared__ float p[kMaxRoutedExperts];
  uint32_t* ids = routes + uint64_t(blockIdx.x) * 2 * k;
  route_top_k(gpu::WarpLanes{}, logits + uint64_t(blockIdx.x) * n_expert, n_expert, k, gating, p, ids,
              reinterpret_cast<float*>(ids + k));
}

}  // namespace

void gpu_route(gpu_stream_t s, const float* logits, uint32_t n_expert, uint32_t k, uint32_t* ids, float* weights,
               Gating gating) {
  route_warp_kernel<<<1, 32, 0, s>>>(logits, n_expert, k, gating, ids, weights);
  device::check_cuda(cudaGetLastError(), "routing kernel");
}

void gpu_route_tokens(gpu_stream_t s, const float* logits, uint32_t n, uint32_t n_expert, uint32_t k, uint32_t* routes,
                      Gating gating) {
  if (n == 0) return;
  route_tokens_kernel<<<n, 32, 0, s>>>(logits, n_expert, k, gating, routes);
  device::check_cuda(cudaGetLastError(), "routing kernel");
}

void gpu_route_serial(gpu_stream_t s, const float* logits, uint32_t n_expert, uint32_t k, uint32_t* ids, float* weights,
                      Gating gating) {
  route_serial_kernel<<<1, 1, 0, s>>>(logits, n_expert, k, gating, ids, weights);
  device::check_cuda(cudaGetLastError(), "routing kernel");
}

}  // namespace gpunvme::llm
