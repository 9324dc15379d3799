// route_top_k (route.h) on one CUDA warp: the routing kernels' lanes (gpu_route.cu) and the fused
// one-token MoE's (gpu_moe_token.cu), so that both route with the same bits.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "examples/llm/compute/route.h"

namespace gpunvme::llm::gpu {

// Butterfly reductions that give every lane the same value.
struct WarpLanes {
  static constexpr uint32_t kSize = 32;
  __device__ uint32_t lane() const { return threadIdx.x % 32; }
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
// floats or ids each): the fused MoE's router launch (gpu_moe_token.cu), whose last block routes logits
// that other blocks of the same launch wrote: they are read once, from L2 (__ldcg), and the picks and
// weights stay in shared memory until the end, then are copied out. The same function on the same
// values: gpu_route's ids and weights. (Measured on an H200 as the routing kernel's own body: 9.6 us a
// Qwen3-30B-A3B layer against 8.8 us for route_top_k over global memory, within the runs' noise; the
// routing kernels keep the simpler form.)
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
