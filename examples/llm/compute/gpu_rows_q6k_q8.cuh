// Q6_K's lean loop of the one-token 8-bit-x products (issue 36; included at the end of gpu_rows_q8.cuh,
// whose matvec_q8_kernel takes it where q6k_lean_fits): warp_dot_rows_q8's Q6_K arithmetic, lane for
// lane (lane l: slice l % 8 of super-blocks l / 8, l / 8 + 4, ... in order, then the butterfly), so
// quant/q8_dot.h's q6k_row_dot_q8 stays its CPU twin, bit for bit. Only where the bytes come from
// changes.
//
// Why: a Q6_K super-block is 210 bytes, so a lane's slice (two 8-byte runs of ql, one of qh, the scales,
// d) is 2-byte aligned and warp_dot_rows_q8 reads it as 13 word loads (load_words_any), each warp load
// touching the 4 super-blocks' 7-8 cache lines: one L1 wavefront per line per load, ~100 wavefronts per
// 840 bytes of weights, about 8 bytes a cycle an SM. ncu on Llama-3-70B Q6_K's decode (H200, tree
// e7a3b36) measured the gate/up launch at 2.14 TB/s and the others at 1.5-1.8 TB/s, near that limit (the
// copy moves 4.3). Here a warp reads a step's 4 super-blocks of each row (840 bytes: 105 8-byte words)
// with coalesced 8-byte loads (a warp load: 256 consecutive bytes, 2 wavefronts), puts them in its own
// shared scratch, and the lanes take their slices from there. Two steps' loads are in flight while a
// step's sums run (a register ring of two). Needs rows 8-byte aligned and whole steps (cols a multiple
// of 1024: every Llama shape), and the scratch beside x within a block's 48 KB (q6k_lean_fits, one rule
// for the launch and the kernel; it and the step's constants are in gpu_rows_q8.cuh, beside the kernel);
// other rows keep warp_dot_rows_q8's loop.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "examples/llm/compute/gpu_rows_q8.cuh"  // included by it at its end: the parts used here are above

namespace gpunvme::llm::gpu {

// R 8-byte aligned Q6_K rows, groups a multiple of 32, times the staged x at sm by one warp, with this
// warp's scratch (R * kQ6StepBytes, 8-byte aligned); out[r] in every lane, warp_dot_rows_q8<Q6_K, R>'s bits.
template <uint32_t R>
__device__ inline void warp_dot_rows_q6k_q8_lean(const uint8_t* const (&row)[R], uint32_t groups, const uint8_t* sm,
                                                 uint8_t* scratch, uint32_t lane, float (&out)[R]) {
  using Ring = uint2[R][kQ6LaneWords];
  const uint32_t blocks = groups / 8, s = lane % 8, sub = lane / 8;
  auto load = [&](uint32_t b0, Ring& w) {  // step b0's words of every row, lane l's l, l + 32, ...
    if (b0 >= blocks) return;
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) {
      const uint2* src = reinterpret_cast<const uint2*>(row[r] + uint64_t(b0) * sizeof(BlockQ6_K));
#pragma unroll
      for (uint32_t i = 0; i < kQ6LaneWords; ++i)
        if (lane + 32 * i < kQ6StepWords) w[r][i] = src[lane + 32 * i];
    }
  };
  float part[R];
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) part[r] = 0.0f;
  // Step b0: its words (in w) to the scratch, step b0 + 8's loads into w, then the step's sums.
  auto step = [&](uint32_t b0, Ring& w) {
    __syncwarp();  // every lane's reads of the previous step are done
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) {
      uint2* dst = reinterpret_cast<uint2*>(scratch + r * kQ6StepBytes);
#pragma unroll
      for (uint32_t i = 0; i < kQ6LaneWords; ++i)
        if (lane + 32 * i < kQ6StepWords) dst[lane + 32 * i] = w[r][i];
    }
    __syncwarp();
    load(b0 + 2 * kQ6StepBlocks, w);
    const Q8Slice6 x = staged_slice6(sm, groups, b0 + sub, s);
#pragma unroll
    for (uint32_t r = 0; r < R; ++r)
      part[r] = q6k_slice_dot(q6k_slice(scratch + r * kQ6StepBytes + sub * sizeof(BlockQ6_K), s), x, part[r]);
  };
  Ring a, b;
  load(0, a);
  load(kQ6StepBlocks, b);
  for (uint32_t b0 = 0; b0 < blocks; b0 += 2 * kQ6StepBlocks) {
    step(b0, a);
    if (b0 + kQ6StepBlocks < blocks) step(b0 + kQ6StepBlocks, b);
  }
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) out[r] = warp_sum(part[r]);
}

}  // namespace gpunvme::llm::gpu
