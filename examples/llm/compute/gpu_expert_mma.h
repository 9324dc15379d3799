// The experts' products of a grouped MoE prompt pass on the tensor cores (issue 36): one launch multiplies
// one projection of many experts, each by the tokens routed to it. A block takes 64 of an expert's weight
// rows and up to 64 of its tokens (gathered into consecutive rows, gpu_moe_grouped.h): it dequantizes the
// rows 64 columns at a time into shared memory as 16-bit values (dequant_group, the one decoder of every
// type), next to the tokens' 16-bit vectors (gpu_gemm_inputs: scaled by powers of two into FP16's range,
// copied by cp.async), and multiplies them with WMMA, FP32 accumulation; two buffers, so that the next
// step's loads are in flight while the warps multiply this one's (one barrier a step, not two); the epilogue undoes the tokens' scales and adds the
// expert's bias row. The same 16-bit rounding as the dense prompt product (gpu_gemm.h, gemm_error_bound
// bounds both), without its scratch: the weights are read quantized, as llama.cpp's MMQ reads them.
//
// Resident and fetched experts, the same bits: a block's result depends only on its expert's bytes, its
// tokens' 16-bit vectors and scales, and its tile's position in the matrix, never on the other tiles of
// the launch or on where the bytes are; an expert is found either in a stack in VRAM (w + expert *
// mat_bytes) or in the expert fetcher's scratchpad through the fetch's table (the part of its projection
// there), in the same kernel.
#pragma once
#include <cstdint>

#include "examples/llm/compute/gpu_gemm.h"
#include "runtime/stream/gpu_fetch_types.h"

namespace gpunvme::llm {

inline constexpr uint32_t kExpertTileRows = 64;    // weight rows per block
inline constexpr uint32_t kExpertTileTokens = 64;  // gathered token rows per block at most

// One block's tokens: gathered rows [row0, row0 + count) (count <= kExpertTileTokens), all routed to
// `expert`; `slot`: the expert's routing index in the fetch that read it (fetched experts only).
struct ExpertTile {
  uint32_t expert = 0, slot = 0, row0 = 0, count = 0;
};

// One projection of a layer's experts: its type and shape, and where each expert's matrix is. Resident:
// `w` is expert 0's matrix, mat_bytes the stride. Fetched (`ex` set): the part `proj` (model::Projection)
// of ex[selection[slot]] in `scratch`, which must be the tile's expert and rows x row_bytes long; a
// missing part or a failed read makes the tile's outputs NaN (no garbage read).
struct ExpertWeights {
  GgmlType type = GgmlType::F32;
  uint64_t row_bytes = 0;
  uint32_t rows = 0, cols = 0;
  const uint8_t* w = nullptr;
  uint64_t mat_bytes = 0;
  const uint8_t* scratch = nullptr;
  const stream::GpuFetchedExpert* ex = nullptr;
  const uint32_t* selection = nullptr;
  uint32_t proj = 0;
};

// For each of the n_tiles tiles (device memory; a tile of count 0 is skipped) and each row r < m.rows:
// y[(row0 + t) * m.rows + r] = (W_expert[r] . xh[row0 + t]) * scale[row0 + t] + bias[expert][r] for
// t < count, enqueued on `s`. xh: the gathered rows in gemm_elem_for(m.type), m.cols wide, as
// gpu_gemm_inputs writes them; bias: [n_expert][m.rows] floats, or null. m.cols a multiple of 32.
void gpu_expert_products(gpu_stream_t s, const ExpertWeights& m, const ExpertTile* tiles, uint32_t n_tiles, const void* xh,
                         const float* scale, const float* bias, float* y);

}  // namespace gpunvme::llm
