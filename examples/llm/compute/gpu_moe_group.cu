#include "examples/llm/compute/gpu_moe_group.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "device/cuda_check.h"

namespace gpunvme::llm {
namespace {

// One block of W warps. Warp w owns the entries [w chunk, (w + 1) chunk) of the n k routing entries
// (entry i: token i / k's choice i % k). hist[w][e]: first warp w's count of expert e (shared atomics:
// counts, whose order does not matter), then the rows of e before warp w's (a scan over the warps), then
// as the warp walks its entries in order, the rows it has placed. A warp places 32 entries at a time:
// an entry's rank among the same expert's entries of those 32 (__match_any_sync) after the rows before.
__global__ void group_kernel(const uint32_t* routes, uint32_t n, uint32_t k, uint32_t n_expert, uint32_t* rows,
                             uint32_t* pos, ExpertTile* tiles, uint32_t max_tiles, uint32_t* used) {
  extern __shared__ uint32_t sh[];
  const uint32_t W = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint32_t* hist = sh;                          // [W][n_expert]
  uint32_t* count = hist + W * n_expert;        // [n_expert]
  uint32_t* first = count + n_expert;           // [n_expert]: the expert's first row
  uint32_t* tile0 = first + n_expert;           // [n_expert]: its first tile
  uint32_t* slot = tile0 + n_expert;            // [n_expert]: its index among the used experts
  __shared__ uint32_t n_tiles;
  const uint32_t entries = n * k;
  const uint32_t chunk = (entries + W * 32 - 1) / (W * 32) * 32;
  const uint32_t begin = warp * chunk, end = min(entries, begin + chunk);
  const auto id = [&](uint32_t i) { return routes[uint64_t(i / k) * 2 * k + i % k]; };

  for (uint32_t i = threadIdx.x; i < W * n_expert; i += blockDim.x) hist[i] = 0;
  __syncthreads();
  for (uint32_t i = begin + lane; i < end; i += 32) {
    const uint32_t e = id(i);
    if (e >= n_expert) __trap();  // the host's grouping threw here: a corrupt routing, loudly
    atomicAdd(&hist[warp * n_expert + e], 1u);
  }
  __syncthreads();
  for (uint32_t e = threadIdx.x; e < n_expert; e += blockDim.x) {
    uint32_t c = 0;
    for (uint32_t v = 0; v < W; ++v) {
      const uint32_t h = hist[v * n_expert + e];
      hist[v * n_expert + e] = c;
      c += h;
    }
    count[e] = c;
  }
  __syncthreads();
  if (warp == 0) {  // exclusive scans over the experts in order of id: rows, tiles, used experts
    uint32_t rows_before = 0, tiles_before = 0, used_before = 0;
    for (uint32_t e0 = 0; e0 < n_expert; e0 += 32) {
      const uint32_t e = e0 + lane;
      const uint32_t c = e < n_expert ? count[e] : 0;
      uint32_t r = c, t = (c + kExpertTileTokens - 1) / kExpertTileTokens, u = c ? 1 : 0;
      for (uint32_t o = 1; o < 32; o <<= 1) {  // inclusive scans
        const uint32_t rr = __shfl_up_sync(0xffffffffu, r, o), tt = __shfl_up_sync(0xffffffffu, t, o),
                       uu = __shfl_up_sync(0xffffffffu, u, o);
        if (lane >= o) r += rr, t += tt, u += uu;
      }
      if (e < n_expert) {
        first[e] = rows_before + r - c;
        tile0[e] = tiles_before + t - (c + kExpertTileTokens - 1) / kExpertTileTokens;
        slot[e] = used_before + u - (c ? 1 : 0);
      }
      rows_before += __shfl_sync(0xffffffffu, r, 31);
      tiles_before += __shfl_sync(0xffffffffu, t, 31);
      used_before += __shfl_sync(0xffffffffu, u, 31);
    }
    if (lane == 0) n_tiles = tiles_before;
  }
  __syncthreads();
  for (uint32_t i0 = begin; i0 < begin + chunk; i0 += 32) {  // every lane the same trips: the warp's collectives
    const uint32_t i = i0 + lane;
    const bool in = i < end;
    const uint32_t e = in ? id(i) : n_expert;
    const uint32_t peers = __match_any_sync(0xffffffffu, e);
    const uint32_t rank = __popc(peers & ((1u << lane) - 1u));
    uint32_t* placed = in ? &hist[warp * n_expert + e] : nullptr;
    if (in) {
      const uint32_t r = first[e] + *placed + rank;
      rows[r] = i / k;
      pos[i] = r;
    }
    __syncwarp();
    if (in && lane == 31 - __clz(peers)) *placed += __popc(peers);  // the last of its peers, after all have read
    __syncwarp();
  }
  for (uint32_t e = threadIdx.x; e < n_expert; e += blockDim.x) {
    const uint32_t c = count[e];
    for (uint32_t q = 0; q * kExpertTileTokens < c; ++q)
      tiles[tile0[e] + q] = {e, slot[e] % k, first[e] + q * kExpertTileTokens, min(kExpertTileTokens, c - q * kExpertTileTokens)};
    if (c) used[slot[e]] = e;
  }
  for (uint32_t i = n_tiles + threadIdx.x; i < max_tiles; i += blockDim.x) tiles[i] = {0, 0, 0, 0};
}

}  // namespace

void gpu_group_by_expert(gpu_stream_t stream, const uint32_t* routes, uint32_t n, uint32_t k, uint32_t n_expert, uint32_t* rows,
                         uint32_t* pos, ExpertTile* tiles, uint32_t max_tiles, uint32_t* used) {
  if (!gpu_groups(n_expert) || k == 0 || max_tiles < expert_tiles_bound(uint64_t(n) * k, n_expert))
    throw std::logic_error("gpu_group_by_expert: " + std::to_string(n_expert) + " experts (1..1024), " + std::to_string(max_tiles) +
                           " tiles for " + std::to_string(uint64_t(n) * k) + " rows");
  if (n == 0) return;
  const uint32_t warps = n_expert <= 256 ? 32 : 4;  // (warps + 4) x n_expert words: under 48 KiB
  const size_t shared = size_t(warps + 4) * n_expert * sizeof(uint32_t);
  group_kernel<<<1, warps * 32, shared, reinterpret_cast<cudaStream_t>(stream)>>>(routes, n, k, n_expert, rows, pos, tiles, max_tiles,
                                                                                    used);
  device::check_cuda(cudaGetLastError(), "grouping by expert");
}

}  // namespace gpunvme::llm
