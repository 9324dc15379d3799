// Q6_K's and Q8_0's one-token 8-bit-x products through shared scratch (issue 36; included at the end of
// gpu_rows_q8.cuh, whose matvec_q8_kernel takes them where q8_scratch_fits and the rows are 8-byte
// aligned): warp_dot_rows_q8's arithmetic, lane for lane (Q6_K lane l: slice l % 8 of super-blocks
// l / 8, l / 8 + 4, ...; Q8_0 lane l: blocks l, l + 32, ...; in order, then the butterfly), so
// quant/q8_dot.h's q6k_row_dot_q8 and q8_0_row_dot_q8 stay their CPU twins, bit for bit. Only where
// the bytes come from changes.
//
// Why: a Q6_K super-block is 210 bytes and a Q8_0 block 34, so a lane's bytes are 2-byte aligned and
// warp_dot_rows_q8 reads them as word loads (load_words_any: 13 for a Q6_K slice, 9 for a Q8_0 block),
// each warp load spread over the step's 7-9 cache lines: an L1 wavefront per line per load, about 8-12
// bytes of weights a wavefront. ncu on Llama-3-70B Q6_K's decode (H200, tree e7a3b36) had the products
// at 1.5-2.1 TB/s, near that limit, where a copy moves 4.3. Here a warp reads a step of 32 groups of
// each row (840 or 1088 bytes) with coalesced 8-byte loads (a warp load: 256 consecutive bytes, 2
// wavefronts), puts it in its own shared scratch, and the lanes take their bytes from there; two
// steps' loads are in flight while a step's sums run (a register ring of two). Q6_K at e7a3b36 →
// 941f525: the 70B's gate/up launch 2.14 → 3.00 TB/s, tg128 33.9 → 45.3 tokens/s.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "examples/llm/compute/gpu_rows_q8.cuh"  // included by it at its end: the parts used here are above

namespace gpunvme::llm::gpu {

// R rows, Bytes a step, through a warp's scratch (R * Stride bytes, 8-byte aligned): each step's bytes of
// every row land at scratch + r * Stride, then sum(step) runs on them; two steps' loads in flight. steps:
// the rows' length in steps.
template <uint32_t Bytes, uint32_t Stride, uint32_t R, class Sum>
__device__ inline void warp_steps_through_scratch(const uint8_t* const (&row)[R], uint32_t steps, uint8_t* scratch,
                                                  uint32_t lane, Sum&& sum) {
  constexpr uint32_t kWords = Bytes / 8, kLane = (kWords + 31) / 32;  // 8-byte words a step, loads a lane a row
  using Ring = uint2[R][kLane];
  auto load = [&](uint32_t t, Ring& w) {  // step t's words of every row, lane l's l, l + 32, ...
    if (t >= steps) return;
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) {
      const uint2* src = reinterpret_cast<const uint2*>(row[r] + uint64_t(t) * Bytes);
#pragma unroll
      for (uint32_t i = 0; i < kLane; ++i)
        if (lane + 32 * i < kWords) w[r][i] = src[lane + 32 * i];
    }
  };
  // Step t: its words (in w) to the scratch, step t + 2's loads into w, then the step's sums.
  auto step = [&](uint32_t t, Ring& w) {
    __syncwarp();  // every lane's reads of the step before are done
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) {
      uint2* dst = reinterpret_cast<uint2*>(scratch + r * Stride);
#pragma unroll
      for (uint32_t i = 0; i < kLane; ++i)
        if (lane + 32 * i < kWords) dst[lane + 32 * i] = w[r][i];
    }
    __syncwarp();
    load(t + 2, w);
    sum(t);
  };
  Ring a, b;
  load(0, a);
  load(1, b);
  for (uint32_t t = 0; t < steps; t += 2) {
    step(t, a);
    if (t + 1 < steps) step(t + 1, b);
  }
}

template <GgmlType T, uint32_t R>
__device__ inline void warp_dot_rows_q8_scratch(const uint8_t* const (&row)[R], uint32_t groups, const uint8_t* sm,
                                                uint8_t* scratch, uint32_t lane, float (&out)[R]) {
  constexpr uint32_t kBytes = q8_step_bytes<T>(), kStride = q8_scratch_row_bytes<T>();
  float part[R];
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) part[r] = 0.0f;
  if constexpr (T == GgmlType::Q6_K) {
    const uint32_t s = lane % 8, sub = lane / 8;  // slice s of the step's super-block sub
    warp_steps_through_scratch<kBytes, kStride, R>(row, groups / 32, scratch, lane, [&](uint32_t t) {
      const Q8Slice6 x = staged_slice6(sm, groups, 4 * t + sub, s);
#pragma unroll
      for (uint32_t r = 0; r < R; ++r)
        part[r] = q6k_slice_dot(q6k_slice(scratch + r * kStride + sub * sizeof(BlockQ6_K), s), x, part[r]);
    });
  } else {
    static_assert(T == GgmlType::Q8_0);
    const uint4* lo = reinterpret_cast<const uint4*>(sm);
    const uint4* hi = reinterpret_cast<const uint4*>(sm + 16 * uint64_t(groups));
    const float* ds = reinterpret_cast<const float*>(sm + 32 * uint64_t(groups));
    warp_steps_through_scratch<kBytes, kStride, R>(row, groups / 32, scratch, lane, [&](uint32_t t) {
      const uint32_t g = 32 * t + lane;  // the lane's block
      const uint4 a = lo[g], b = hi[g];
      const uint32_t xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (uint32_t r = 0; r < R; ++r) {
        const uint8_t* blk = scratch + r * kStride + lane * sizeof(BlockQ8_0);
        uint32_t q[8];
        load_words_any<8>(blk + 2, q);
        part[r] = q8_0_block_dot(*reinterpret_cast<const uint16_t*>(blk), q, xv, ds[g], part[r]);
      }
    });
  }
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) out[r] = warp_sum(part[r]);
}

}  // namespace gpunvme::llm::gpu
