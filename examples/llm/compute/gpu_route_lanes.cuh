// route_top_k's lanes (route.h) as one CUDA warp: the routing kernels' (gpu_route.cu) and the fused
// one-token MoE's (gpu_moe_token.cu), so that both route with the same bits.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

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

}  // namespace gpunvme::llm::gpu
