// A row set's groups shared by a team of warps in the single-token kernels (issue 36), with the bits of
// one warp taking them all.
//
// Why: a warp computes its R rows' groups one after another (lane i: groups i, i + 32, ...), with one
// group's loads ahead. A matrix of few rows then has few warps in flight and each walks its rows' groups
// in a long chain of loads: Llama-3-8B's 1024 x 4096 K and V at 577 GB/s on an H200 (14 % of a copy),
// 4096 x 4096 at 1243. A team of `warps` warps takes a set's chunks of 32 groups in turn (warp k of the
// team: chunks k, k + warps, ...), so the chain is that many times shorter. Each group's sum (its 32
// products in their order, by the same code) goes to shared memory instead of into the lane's running
// sum; after the team's barrier the team's first warp adds them as the one warp would have: lane i from
// 0.0f, groups i, i + 32, ... in order, then the same butterfly. So every result keeps its bits, and the
// n-token kernels (which repeat the one warp's order) still agree with it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "examples/llm/compute/gpu_warp.cuh"

namespace gpunvme::llm::gpu {

// This warp's share of a set: chunks index, index + warps, ... of the set's rows; with `sums` (warps > 1),
// group g of row r's sum goes to sums[r * groups + g].
struct GroupShare {
  uint32_t index = 0, warps = 1;
  float* sums = nullptr;
  uint32_t groups = 0;
};

// How a lane walks and keeps its groups' sums for R rows. Shared false (one warp a set): every group of
// the set, lane, lane + 32, ..., added into the lane's running sums, and finish() gives the rows' dot
// products in every lane. Shared true: the team's share, each sum stored to share.sums (the team's first
// warp then reads them back with team_dot). A template argument, not a test of share.sums at each group:
// with both in one loop, Q4_K's two-row loop spilled 150 bytes a thread under the 85-register bound.
template <uint32_t R, bool Shared>
struct LaneSums {
  GroupShare share;
  float part[R];
  __device__ explicit LaneSums(const GroupShare& s) : share(s) {
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) part[r] = 0.0f;
  }
  __device__ uint32_t first_chunk() const { return Shared ? share.index : 0; }
  __device__ uint32_t chunk_step() const { return Shared ? share.warps : 1; }
  __device__ uint32_t first_group(uint32_t lane) const { return 32 * first_chunk() + lane; }
  __device__ uint32_t step() const { return 32 * chunk_step(); }
  __device__ void add(uint32_t r, uint32_t g, float s) {
    if constexpr (Shared) share.sums[r * share.groups + g] = s;
    else part[r] += s;
  }
  __device__ void finish(float (&out)[R]) const {
    if constexpr (!Shared) {
#pragma unroll
      for (uint32_t r = 0; r < R; ++r) out[r] = warp_sum(part[r]);
    }
  }
};

// The rows' dot products from the team's group sums (every lane of one warp), in LaneSums's order for one warp.
template <uint32_t R>
__device__ inline void team_dot(const float* sums, uint32_t groups, uint32_t lane, float (&out)[R]) {
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) {
    float part = 0.0f;
    for (uint32_t g = lane; g < groups; g += 32) part += sums[r * groups + g];
    out[r] = warp_sum(part);
  }
}

// The barrier of team `team` (its `warps` warps only; barrier 0 is __syncthreads's).
__device__ inline void team_sync(uint32_t team, uint32_t warps) {
  asm volatile("bar.sync %0, %1;" ::"r"(team + 1), "r"(warps * 32) : "memory");
}

}  // namespace gpunvme::llm::gpu
