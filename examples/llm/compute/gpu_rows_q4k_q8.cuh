// Q4_K's lean one-token product with 8-bit x (issue 36): gpu_rows_q8.cuh's Q4_K arithmetic, lane for lane
// and operation for operation (so quant/q8_dot.h's q4k_row_dot_q8 is still its CPU twin, bit for bit),
// with fewer instructions and more of a warp's loads in flight.
//
// Why: gpu_rows_q8.cuh's Q4_K loop (3.511 ms of products a Llama-3-8B Q4_K token on an H200, against the
// FP32 kernel's 2.947) loads each header and slice by load_words, which tests the address's alignment
// at every load and carries its 4-byte and funnel-shift fallbacks (the lean FP32 loop's finding,
// gpu_rows_lean.cuh): each load sits in its own branch, so the compiler cannot issue the next rows' or
// super-blocks' loads before this one's arithmetic, and a warp has one slice's bytes in flight. It also
// decodes the slice's 6-bit scales and mins through scale_min_k4's byte picks on every slice and row, and
// sums x's int8 values (8 dp4a) on every slice. Here: a row set whose rows are 16-byte aligned (tested once
// a set) loads header and slice as plain 16-byte loads, D super-block steps ahead of the arithmetic (all R
// rows' loads before any row's sums); the lane's scale and min bytes are picked from the header words by
// shifts fixed per lane (both of its sub-blocks at once); d and dmin convert by one instruction each
// unless one is a NaN; x's sums are computed once per block after staging (stage_q4k_sums). Rows that are
// not 16-byte aligned take gpu_rows_q8.cuh's loop (the same bits). warp_dot_rows_q8 itself takes the lean
// loop (one step ahead, x's sums computed) for aligned Q4_K rows, so the other 8-bit kernels (passes of
// 2-32 tokens, selected experts: gpu_rows_q8_batch.cuh) get it too.
//
// Variants (GPUNVME_Q4K_VARIANT, read once; issue 36's trial, one GPU call measures them all): 0 one step
// ahead, x's sums computed per slice (warp_dot_rows_q8's, which the other 8-bit kernels take); 1: one step ahead, no register bound; 2: two steps ahead, no register bound; 3: one
// step ahead at 3 blocks an SM (85 registers); 4: two steps ahead at 3 blocks an SM.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "examples/llm/compute/gpu_rows_lean.cuh"
#include "examples/llm/compute/gpu_rows_q8.cuh"  // included by it at its end: its kernel's parts are above

namespace gpunvme::llm::gpu {

// Shared bytes of the Q4_K kernel: stage_q8's, then each slice's two sums of 16 (an int2 a slice, `groups`
// slices: 8 a super-block).
constexpr uint64_t q4k_q8_shared_bytes(uint32_t groups) { return q8_shared_bytes(groups) + 8 * uint64_t(groups); }

// After stage_q8 (x's slices in sm): the sums of each slice's low and high 16 values (q8_slice_sums), once
// for the block instead of once per slice and warp; then a barrier.
__device__ inline void stage_q4k_sums(uint8_t* sm, uint32_t groups) {
  const uint4* lo = reinterpret_cast<const uint4*>(sm);
  const uint4* hi = reinterpret_cast<const uint4*>(sm + 16 * uint64_t(groups));
  int2* sums = reinterpret_cast<int2*>(sm + q8_shared_bytes(groups));
  for (uint32_t i = threadIdx.x; i < groups; i += blockDim.x) {
    const uint4 l = lo[i], h = hi[i];
    Q8Slice x{{l.x, l.y, l.z, l.w}, {h.x, h.y, h.z, h.w}, 0.0f, 0.0f, 0, 0};
    q8_slice_sums(x);
    sums[i] = make_int2(x.slo, x.shi);
  }
  __syncthreads();
}

// x's side of slice s of super-block b: staged_slice's values, the sums read instead of computed.
__device__ inline Q8Slice staged_slice_summed(const uint8_t* sm, uint32_t groups, uint32_t b, uint32_t s) {
  const uint4 l = reinterpret_cast<const uint4*>(sm)[8 * b + s];
  const uint4 h = reinterpret_cast<const uint4*>(sm + 16 * uint64_t(groups))[8 * b + s];
  const float2 d = reinterpret_cast<const float2*>(sm + 32 * uint64_t(groups))[4 * b + s / 2];  // ds[8b + 2(s/2)], +1
  const int2 sum = reinterpret_cast<const int2*>(sm + q8_shared_bytes(groups))[8 * b + s];
  return Q8Slice{{l.x, l.y, l.z, l.w}, {h.x, h.y, h.z, h.w}, d.x, d.y, sum.x, sum.y};
}

// A lane's fixed place in every super-block: slice s = lane % 8, whose sub-blocks j = 2 (s / 2) and j + 1
// have their scale_min_k4 bytes at byte j % 4 and the next of the header's scale words (bytes 4..7 in
// head.y, 8..11 in head.z, 12..15 in head.w), 6-bit fields for j < 4, split nibble + 2 bits above.
struct Q4kQ8Lane {
  uint32_t s, shift;
  bool high;
  __device__ explicit Q4kQ8Lane(uint32_t lane) : s(lane % 8), shift(16 * ((lane % 8) / 2 % 2)), high(lane % 8 >= 4) {}
};

// q4k_slice_dot's value from the 16-byte header and slice words: the same integers (the dot products
// exact in any order, scale_min_k4's bytes), then its float tail (q4k_slice_sum).
__device__ inline float q4k_q8_lean_dot(const uint4& head, const uint4& q, const Q8Slice& x, const Q4kQ8Lane& c) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
  int32_t dlo = 0, dhi = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    dlo = dot4_i8(w[k] & 0x0F0F0F0Fu, x.lo[k], dlo);
    dhi = dot4_i8((w[k] >> 4) & 0x0F0F0F0Fu, x.hi[k], dhi);
  }
  // Both sub-blocks' bytes at once: byte 0 of each pair is sub-block j's, byte 1 is j + 1's.
  const uint32_t a = head.y >> c.shift, m4 = head.z >> c.shift, h = head.w >> c.shift;
  const uint32_t sc = c.high ? (h & 0x0F0Fu) | ((a >> 2) & 0x3030u) : a & 0x3F3Fu;
  const uint32_t m = c.high ? ((h >> 4) & 0x0F0Fu) | ((m4 >> 2) & 0x3030u) : m4 & 0x3F3Fu;
  float d, dmin;
  if (half2_nan_mask(head.x) == 0) {
    d = finite_half_to_float(head.x & 0xFFFFu);
    dmin = finite_half_to_float(head.x >> 16);
  } else {
    d = half_to_float(uint16_t(head.x & 0xFFFFu));
    dmin = half_to_float(uint16_t(head.x >> 16));
  }
  return q4k_slice_sum(dlo, dhi, int32_t(sc & 0xFFu), int32_t(sc >> 8), int32_t(m & 0xFFu), int32_t(m >> 8), d, dmin, x);
}

// R 16-byte aligned Q4_K rows times the staged x by one warp, q4k_row_dot_q8's order (lane l: slice l % 8
// of super-blocks l / 8, l / 8 + 4, ... in order, then the butterfly); out[r] in every lane. The rows'
// headers and slices of the next D steps (4 super-blocks a step) are loaded before a step's sums. Summed:
// x's slice sums from stage_q4k_sums (else computed, staged_slice): the same integers.
template <uint32_t R, uint32_t D, bool Summed>
__device__ inline void warp_dot_rows_q4k_q8_lean(const uint8_t* const (&row)[R], uint32_t groups, const uint8_t* sm,
                                                 uint32_t lane, float (&out)[R]) {
  const Q4kQ8Lane c(lane);
  const uint32_t blocks = groups / 8;
  float part[R];
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) part[r] = 0.0f;
  uint4 head[D][R], q[D][R];
  auto load = [&](uint32_t k, uint32_t b) {
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) {
      const uint4* blk = reinterpret_cast<const uint4*>(row[r] + uint64_t(b) * sizeof(BlockQ4_K));
      head[k][r] = blk[0];
      q[k][r] = blk[1 + c.s];
    }
  };
  const uint32_t b0 = lane / 8;
#pragma unroll
  for (uint32_t k = 0; k < D; ++k)
    if (b0 + 4 * k < blocks) load(k, b0 + 4 * k);
  for (uint32_t b = b0; b < blocks; b += 4 * D) {
#pragma unroll
    for (uint32_t k = 0; k < D; ++k) {
      const uint32_t bk = b + 4 * k;
      if (bk >= blocks) break;
      uint4 hn[R], qn[R];  // step bk + 4D's bytes, in flight during this step's sums
      const bool more = bk + 4 * D < blocks;
      if (more) {
#pragma unroll
        for (uint32_t r = 0; r < R; ++r) {
          const uint4* blk = reinterpret_cast<const uint4*>(row[r] + uint64_t(bk + 4 * D) * sizeof(BlockQ4_K));
          hn[r] = blk[0];
          qn[r] = blk[1 + c.s];
        }
      }
      const Q8Slice x = Summed ? staged_slice_summed(sm, groups, bk, c.s) : staged_slice(sm, groups, bk, c.s);
#pragma unroll
      for (uint32_t r = 0; r < R; ++r) part[r] += q4k_q8_lean_dot(head[k][r], q[k][r], x, c);
      if (more) {
#pragma unroll
        for (uint32_t r = 0; r < R; ++r) head[k][r] = hn[r], q[k][r] = qn[r];
      }
    }
  }
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) out[r] = warp_sum(part[r]);
}

// matvec_q8_kernel for Q4_K rows: stage_q8, the slices' sums, then each warp's row sets by the lean loop
// (D steps ahead, x's sums from stage_q4k_sums) where the set's rows are 16-byte aligned, else
// warp_dot_rows_q8 (which takes the lean loop one step ahead with x's sums computed, or for rows not
// 16-byte aligned the old loop); V 0: the latter for every set. MinBlocks: the launch bounds' blocks an SM (1: no register bound).
template <uint32_t R, class Rows, uint32_t V, uint32_t D, uint32_t MinBlocks>
__global__ void __launch_bounds__(kQ8Warps * 32, MinBlocks)
    matvec_q4k_q8_kernel(Rows rows, uint32_t groups, const float* x, const float* norm_w, float eps) {
  extern __shared__ uint4 q8_units[];
  uint8_t* const sm = reinterpret_cast<uint8_t*>(q8_units);
  stage_q8<GgmlType::Q4_K>(x, groups, sm, norm_w, eps);
  if constexpr (V != 0) stage_q4k_sums(sm, groups);
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, per_block = R * (blockDim.x / 32), n = rows.count;
  for (uint32_t first = (warp * gridDim.x + blockIdx.x) * R; first < n; first += gridDim.x * per_block) {
    const uint8_t* p[R];
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) p[r] = rows.row(min(first + r, n - 1));  // a partial last set repeats the last row
    float dot[R];
    if (V != 0 && rows_aligned16(p))
      warp_dot_rows_q4k_q8_lean<R, D, true>(p, groups, sm, lane, dot);
    else
      warp_dot_rows_q8<GgmlType::Q4_K, R>(p, groups, sm, lane, dot);
    if (lane == 0) rows.template store<R>(first, dot);
  }
}

// GPUNVME_Q4K_VARIANT (0..4, default 1), read once.
inline uint32_t q4k_q8_variant() {
  static const uint32_t v = [] {
    const char* e = std::getenv("GPUNVME_Q4K_VARIANT");
    const int n = e && *e ? std::atoi(e) : 1;
    return uint32_t(std::clamp(n, 0, 4));
  }();
  return v;
}

// Launches the variant's kernel over Q4_K `rows` (R = 2 where `two_rows`, as launch_rows_q8 does); false
// where x's bytes and sums pass the default 48 KB of shared memory.
template <class Rows>
bool launch_rows_q4k_q8(cudaStream_t s, const Rows& rows, uint32_t cols, const float* x, const float* norm_w, float eps,
                        bool two_rows) {
  const uint32_t groups = cols / kQ8Block;
  if (q4k_q8_shared_bytes(groups) > 48 * 1024) return false;
  const uint32_t bytes = uint32_t(q4k_q8_shared_bytes(groups));
  with_rows_per_warp<Rows>(two_rows, [&]<uint32_t R>() {
    auto go = [&]<uint32_t V, uint32_t D, uint32_t MinBlocks>() {
      launch_q8_rows<matvec_q4k_q8_kernel<R, Rows, V, D, MinBlocks>, R>(s, rows, groups, bytes, x, norm_w, eps);
    };
    switch (q4k_q8_variant()) {
      case 0: return go.template operator()<0, 1, 1>();
      case 1: return go.template operator()<1, 1, 1>();
      case 2: return go.template operator()<2, 2, 1>();
      case 3: return go.template operator()<3, 1, 3>();
      default: return go.template operator()<4, 2, 3>();
    }
  });
  return true;
}

}  // namespace gpunvme::llm::gpu
