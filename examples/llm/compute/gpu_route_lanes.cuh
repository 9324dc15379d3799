// route_top_k (route.h) on one CUDA warp: the routing kernels' (gpu_route.cu) and the fused one-token
// MoE's (gpu_moe_token.cu), so that both route with the same bits.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "examples/llm/compute/route.h"

namespace gpunvme::llm::gpu {

// Butterfly reductions that give every lane the same value.
struct WarpLanes {
  __device__ uint32_t lane() const { return threadIdx.x % 32; }
  __device__ uint32_t size() const { return 32; }
  __device__ float max(float x) const {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
  }
  __device__ float from_first(float x) const { return __shfl_sync(0xffffffffu, x, 0); }
  __device__ void keep_best(float& bp, uint32_t& best) const {
    for (int o = 16; o > 0; o >>= 1) {
      const float op = __shfl_xor_sync(0xffffffffu, bp, o);
      const uint32_t ob = __shfl_xor_sync(0xffffffffu, best, o);
      if (op > bp || (op == bp && ob < best)) {
        bp = op;
        best = ob;
      }
    }
  }
  __device__ void sync() const { __syncwarp(); }
};

// One token's routing by the calling warp with its operands in shared memory (p, lg, id, wt: n_expert
// floats or ids each): the logits read once (from L2: in the fused MoE other blocks of the launch wrote
// them), the picks and weights kept in shared memory until the end, then copied out. route_top_k stores
// each pick and reads the weights back to normalize them: in global memory those were round trips in a
// dependent chain, most of the warp kernel's 8.8 us a Qwen3-30B-A3B layer on an H200. The same function
// on the same values: the same ids and weights.
__device__ inline void route_warp(const float* logits, uint32_t n_expert, uint32_t k, Gating gating, float* p, float* lg, uint32_t* id,
                                  float* wt, uint32_t* ids, float* weights) {
  const uint32_t lane = threadIdx.x % 32;
  for (uint32_t e = lane; e < n_expert; e += 32) lg[e] = __ldcg(&logits[e]);
  __syncwarp();
  route_top_k(WarpLanes{}, lg, n_expert, k, gating, p, id, wt);
  __syncwarp();
  for (uint32_t j = lane; j < k; j += 32) ids[j] = id[j], weights[j] = wt[j];
}

}  // namespace gpunvme::llm::gpu
