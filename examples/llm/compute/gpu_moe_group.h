// A pass's tokens grouped by expert on the device (issue 36), for the grouped MoE's tensor-core products
// of resident experts: with the grouping made on the host from the routing copied back, every MoE layer of
// a prompt pass waited for its stream (48 waits a 512-token pass of Qwen3-30B-A3B, the GPU idle through
// each copy, the host's grouping and the next launches). Here one block makes the same grouping from the
// routing in device memory, and the products are launched over a bound on the tile count: tiles past the
// pass's last are written empty (count 0), and the expert kernel skips them.
//
// The same grouping as the host's, so the same bits (resident = fetched, whose experts are grouped on the
// host): the used experts in order of id, each one's rows after the previous one's; within an expert, its
// tokens in order (token t's j-th choice, t then j); its tiles of up to kExpertTileTokens rows in order;
// used expert i at routing slot i % k.
#pragma once
#include <algorithm>
#include <cstdint>

#include "examples/llm/compute/gpu_expert_mma.h"

namespace gpunvme::llm {

// Tiles of `rows` grouped rows over n_expert experts, at most: the full tiles, and a partial one per used expert.
inline uint32_t expert_tiles_bound(uint64_t rows, uint32_t n_expert) {
  return uint32_t(rows / kExpertTileTokens + std::min<uint64_t>(n_expert, rows));
}

// Whether gpu_group_by_expert takes n_expert experts (its counts live in shared memory).
inline bool gpu_groups(uint32_t n_expert) { return n_expert >= 1 && n_expert <= 1024; }

// From routes ([n][2k]: token t's k expert ids, then k weights), enqueued on `s`:
//   rows[r] = the token of grouped row r (r < n k), pos[t k + j] = the row of token t's j-th choice,
//   tiles[0 .. max_tiles) = the tiles expert by expert, then empty ones (max_tiles >= expert_tiles_bound),
//   used[i] = the i-th used expert (in order of id).
// An id of n_expert or more (never written by gpu_route_tokens) stops the kernel with a trap.
void gpu_group_by_expert(gpu_stream_t s, const uint32_t* routes, uint32_t n, uint32_t k, uint32_t n_expert, uint32_t* rows,
                         uint32_t* pos, ExpertTile* tiles, uint32_t max_tiles, uint32_t* used);

}  // namespace gpunvme::llm
