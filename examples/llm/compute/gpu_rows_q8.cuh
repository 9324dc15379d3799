// The one-token matrix-vector products with 8-bit activations and integer dot products (llama.cpp's
// mmvq idea; the default for q8_types.h's kDefaultQ8Types, GPUNVME_MATVEC_Q8=0 or
// gpu_set_matvec_q8_types(0) takes the FP32 kernels): Q4_K, Q6_K and Q8_0 rows.
//
// Each block quantises x (or x's RMS norm times norm_w: the norm kernel's values, rms_scale's scale) to
// 8-bit blocks in shared memory once (quant/q8_dot.h's rule), then its warps take R rows each and stride
// over the row set as gpu_rows.cuh's block_rows does, storing through the same row sets (MatrixRows, the
// fused Q/K/V, gate/up+GLU, +add ones), so every fusion keeps working. Q4_K: lane l takes slice l % 8 of
// super-blocks l / 8, l / 8 + 4, ...: a warp reads 4 whole consecutive super-blocks (576 bytes) a step, a
// lane's weights as two 16-byte loads (the block's header and its slice), x's side as two 16-byte
// shared loads laid out so that 8 consecutive lanes read 128 consecutive bytes (no bank conflict).
// Q6_K: Q4_K's lanes, its slices q8_dot.h's. Q8_0: lane l takes blocks l, l + 32, ... The arithmetic
// is q8_dot.h's (q4k_slice_dot, q6k_slice_dot, q8_0_block_dot); its row functions are the CPU twins, bit
// for bit.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "device/cuda_check.h"
#include "examples/llm/compute/gpu_norm.cuh"
#include "examples/llm/compute/gpu_rows.cuh"
#include "examples/llm/compute/gpu_warp.cuh"
#include "examples/llm/quant/q8_dot.h"

namespace gpunvme::llm::gpu {

inline constexpr uint32_t kQ8Warps = 8;  // warps a block: kNormThreads threads, as rms_scale sums
// No register cap: the kernels take 86-88 registers a thread (ptxas -v), room for 2 blocks (16 warps) an
// SM; the measured kernel (session 26, tree 16ecbfc). Not yet measured: launch bounds of 4 blocks an SM
// with 4 loads ahead in stage_q8 (60-64 registers, no spills; at 6 and 8 blocks ptxas spills).
static_assert(kQ8Warps * 32 == kNormThreads && kQ8Warps == kStagedWarps,
              "the norm's scale must be summed as the norm kernel sums it; resident_cap counts kStagedWarps a block");

// Shared bytes for x of `groups` 8-bit blocks: the low-nibble and high-nibble slice halves (16 bytes
// each per slice, a slice per group) and a float scale per block.
constexpr uint64_t q8_shared_bytes(uint32_t groups) { return uint64_t(groups) * (16 + 16 + 4); }

// The one-token 8-bit kernels' static shared memory: stage_q8's norm partial sums (kNormThreads / 32
// doubles). Their launches take no opt-in, so x's dynamic bytes and these must fit the default 48 KB
// together (a launch asking more is refused: "invalid argument"); q8_rows_take counts both, and
// require_q8_static checks each kernel's real static size against this once.
inline constexpr uint32_t kQ8StaticShared = kNormThreads / 32 * sizeof(double);
inline constexpr uint32_t kQ8SharedLimit = 48 * 1024;  // a block's shared memory without the opt-in

// x's 8-bit values are two arrays of 16-byte entries, `lo` then `hi` (16 * groups bytes each), laid out
// so that the 8 lanes of a quarter-warp read 8 consecutive entries of one array (conflict-free). Q4_K:
// block G = 8b + k of super-block b is the low (k even) or high (k odd) side of slice (k - k % 2) + i / 16
// of super-block b, entry G - G % 2 + i / 16. Q8_0: a lane's block's first 16 values in lo, the others
// in hi, entry G. Q6_K: 8-byte entries instead, lane s's elements of group k of super-block b at entry
// (k * blocks + b) * 8 + s, so that a half-warp reads 128 consecutive bytes. The byte offset of element i
// of block G:
template <GgmlType T>
__device__ inline uint32_t q8_slot(uint32_t G, uint32_t i, uint32_t groups) {
  if constexpr (T == GgmlType::Q4_K) {
    return (G % 2) * 16 * groups + 16 * (G - G % 2 + i / 16) + i % 16;
  } else if constexpr (T == GgmlType::Q6_K) {
    const uint32_t b = G / 8, n = (G % 8) / 4, k = G % 4;
    return 8 * (((k * (groups / 8) + b) * 8) + 4 * n + i / 8) + i % 8;
  } else {
    return (i / 16) * 16 * groups + 16 * G + i % 16;
  }
}

// The block quantises `count` vectors x + j * x_stride (groups x 32 floats each, 16-byte aligned) into
// sm + j * sm_stride, then one barrier. A lane holds 4 consecutive elements (a float4; 8 lanes a block),
// so a warp load takes 4 blocks and 512 consecutive bytes; the block's largest magnitude by a butterfly
// over its 8 lanes (a max: exact in any order). The warps take the vectors' quads (4 blocks) in turn as
// one list, kAhead loads (x's and norm_w's) in flight before the first is used: one after another, each
// an L2 latency, a 14336-wide x's prologue would take microseconds in every block, and k vectors staged
// one call at a time (a barrier each) took the fused MoE's down launch k latencies. Each block's bytes and
// scale are the same whatever the count. With norm_w (count 1): x's RMS norm times norm_w, the norm
// kernel's expression.
template <GgmlType T>
__device__ inline void stage_q8_vectors(const float* x, uint64_t x_stride, uint32_t count, uint32_t groups, uint8_t* sm,
                                        uint64_t sm_stride, const float* norm_w, float eps) {
  constexpr uint32_t kAhead = 8;
  __shared__ double partial[kNormThreads / 32];
  static_assert(sizeof(partial) == kQ8StaticShared, "q8_rows_take counts this static shared memory");
  const float scale = norm_w ? rms_scale(x, groups * kQ8Block, eps, partial) : 1.0f;
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32, quads = (groups + 3) / 4;
  const uint32_t jobs = count * quads;  // (vector, quad) pairs, vector-major
  for (uint32_t q0 = warp; q0 < jobs; q0 += kAhead * warps) {
    float4 v[kAhead], nw[kAhead];
#pragma unroll
    for (uint32_t j = 0; j < kAhead; ++j) {
      const uint32_t job = q0 + j * warps, vec = count == 1 ? 0 : job / quads, G = 4 * (job - vec * quads) + lane / 8;
      const uint32_t e = G * kQ8Block + 4 * (lane % 8);
      const bool in = job < jobs && G < groups;
      v[j] = in ? reinterpret_cast<const float4*>(x + vec * x_stride)[8 * G + lane % 8] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (norm_w && in) nw[j] = make_float4(norm_w[e], norm_w[e + 1], norm_w[e + 2], norm_w[e + 3]);  // any alignment
    }
#pragma unroll
    for (uint32_t j = 0; j < kAhead; ++j) {
      const uint32_t job = q0 + j * warps, vec = count == 1 ? 0 : job / quads, G = 4 * (job - vec * quads) + lane / 8, i = 4 * (lane % 8);
      if (job >= jobs) break;  // the same for the whole warp
      float e[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
      if (norm_w && G < groups) {  // the norm kernel's expression, x * scale * w
        const float g[4] = {nw[j].x, nw[j].y, nw[j].z, nw[j].w};
#pragma unroll
        for (int k = 0; k < 4; ++k) e[k] = e[k] * scale * g[k];
      }
      float amax = fmaxf(fmaxf(fabsf(e[0]), fabsf(e[1])), fmaxf(fabsf(e[2]), fabsf(e[3])));
      for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      if (G >= groups) continue;
      const float d = q8_scale(amax);
      uint32_t w = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) w |= uint32_t(uint8_t(q8_value(e[k], d))) << (8 * k);
      uint8_t* const out = sm + vec * sm_stride;
      *reinterpret_cast<uint32_t*>(out + q8_slot<T>(G, i, groups)) = w;
      if (lane % 8 == 0) reinterpret_cast<float*>(out + 32 * uint64_t(groups))[G] = d;
    }
  }
  __syncthreads();
}

// One vector: x (or its RMS norm times norm_w) into sm, then a barrier.
template <GgmlType T>
__device__ inline void stage_q8(const float* x, uint32_t groups, uint8_t* sm, const float* norm_w, float eps) {
  stage_q8_vectors<T>(x, 0, 1, groups, sm, 0, norm_w, eps);
}

// x's side of slice s of super-block b from the staged layout.
__device__ inline Q8Slice staged_slice(const uint8_t* sm, uint32_t groups, uint32_t b, uint32_t s) {
  const uint4 l = reinterpret_cast<const uint4*>(sm)[8 * b + s];
  const uint4 h = reinterpret_cast<const uint4*>(sm + 16 * uint64_t(groups))[8 * b + s];
  const float* ds = reinterpret_cast<const float*>(sm + 32 * uint64_t(groups));
  Q8Slice x{{l.x, l.y, l.z, l.w}, {h.x, h.y, h.z, h.w}, ds[8 * b + 2 * (s / 2)], ds[8 * b + 2 * (s / 2) + 1], 0, 0};
  q8_slice_sums(x);
  return x;
}

// Q6_K: x's side of slice s of super-block b from the staged layout (q8_slot's Q6_K entries).
__device__ inline Q8Slice6 staged_slice6(const uint8_t* sm, uint32_t groups, uint32_t b, uint32_t s) {
  const uint2* xe = reinterpret_cast<const uint2*>(sm);
  const float* ds = reinterpret_cast<const float*>(sm + 32 * uint64_t(groups));
  const uint32_t blocks = groups / 8;
  Q8Slice6 x;
#pragma unroll
  for (uint32_t k = 0; k < 4; ++k) {
    const uint2 v = xe[(k * blocks + b) * 8 + s];
    x.x[k][0] = v.x, x.x[k][1] = v.y;
    x.d[k] = ds[8 * b + 4 * (s / 4) + k];
  }
  return x;
}

// Q4_K's lean loop for 16-byte aligned rows (gpu_rows_q4k_q8.cuh, included at the end of this file): the
// bits of warp_dot_rows_q8's Q4_K loop below, in 2.207 instead of 3.511 ms of Llama-3-8B Q4_K products.
template <uint32_t R>
__device__ inline void warp_dot_rows_q4k_q8_lean(const uint8_t* const (&row)[R], uint32_t groups, const uint8_t* sm,
                                                 uint32_t lane, float (&out)[R]);

// ... and for R rows each with its own staged x (sm[r]; the fused MoE's down rows).
template <uint32_t R>
__device__ inline void warp_dot_rows_q4k_q8_lean_rows(const uint8_t* const (&row)[R], uint32_t groups, const uint8_t* const (&sm)[R],
                                                      uint32_t lane, float (&out)[R]);

// R rows of type T times the staged 8-bit x by one warp, in the CPU twin's order (q4k_row_dot_q8,
// q8_0_row_dot_q8); out[r] in every lane. Q4_K: lane l takes slice l % 8 of super-blocks l / 8, l / 8 + 4,
// ... (the header and the slice as 16-byte loads; 16-byte aligned rows by the lean loop). Q8_0: lane l
// takes blocks l, l + 32, ... (34-byte blocks, 2-byte aligned: the quants as words by funnel shifts,
// load_words_any).
template <GgmlType T, uint32_t R>
__device__ inline void warp_dot_rows_q8(const uint8_t* const (&row)[R], uint32_t groups, const uint8_t* sm, uint32_t lane,
                                        float (&out)[R]) {
  if constexpr (T == GgmlType::Q4_K) {
    if (rows_aligned<16>(row)) return warp_dot_rows_q4k_q8_lean<R>(row, groups, sm, lane, out);
  }
  float part[R];
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) part[r] = 0.0f;
  if constexpr (T == GgmlType::Q4_K) {
    const uint32_t s = lane % 8, blocks = groups / 8;
#pragma unroll 2
    for (uint32_t b = lane / 8; b < blocks; b += 4) {
      const Q8Slice x = staged_slice(sm, groups, b, s);
#pragma unroll
      for (uint32_t r = 0; r < R; ++r) {
        const uint8_t* blk = row[r] + uint64_t(b) * sizeof(BlockQ4_K);
        uint32_t head[4], q[4];
        load_words<4>(blk, head);
        load_words<4>(blk + 16 * (1 + s), q);
        part[r] += q4k_slice_dot(head, q, x, s);
      }
    }
  } else if constexpr (T == GgmlType::Q6_K) {
    const uint32_t s = lane % 8, blocks = groups / 8;
#pragma unroll 2
    for (uint32_t b = lane / 8; b < blocks; b += 4) {
      const Q8Slice6 x = staged_slice6(sm, groups, b, s);
#pragma unroll
      for (uint32_t r = 0; r < R; ++r)
        part[r] = q6k_slice_dot(q6k_slice(row[r] + uint64_t(b) * sizeof(BlockQ6_K), s), x, part[r]);
    }
  } else {
    static_assert(T == GgmlType::Q8_0);
    const uint4* lo = reinterpret_cast<const uint4*>(sm);
    const uint4* hi = reinterpret_cast<const uint4*>(sm + 16 * uint64_t(groups));
    const float* ds = reinterpret_cast<const float*>(sm + 32 * uint64_t(groups));
#pragma unroll 2
    for (uint32_t g = lane; g < groups; g += 32) {
      const uint4 a = lo[g], b = hi[g];
      const uint32_t xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      const float dx = ds[g];
#pragma unroll
      for (uint32_t r = 0; r < R; ++r) {
        const uint8_t* blk = row[r] + uint64_t(g) * sizeof(BlockQ8_0);
        uint32_t q[8];
        load_words_any<8>(blk + 2, q);
        part[r] = q8_0_block_dot(*reinterpret_cast<const uint16_t*>(blk), q, xv, dx, part[r]);
      }
    }
  }
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) out[r] = warp_sum(part[r]);
}

// R rows of type T, row r times its own staged 8-bit x at sm[r], by one warp: out[r] is
// warp_dot_rows_q8<T, 1>'s for that row and x, bit for bit. Aligned Q4_K rows go together (their loads in
// flight at once); the other types and rows one after another.
template <GgmlType T, uint32_t R>
__device__ inline void warp_dot_rows_q8_x(const uint8_t* const (&row)[R], uint32_t groups, const uint8_t* const (&sm)[R], uint32_t lane,
                                          float (&out)[R]) {
  if constexpr (T == GgmlType::Q4_K) {
    if (rows_aligned<16>(row)) return warp_dot_rows_q4k_q8_lean_rows<R>(row, groups, sm, lane, out);
  }
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) {
    const uint8_t* one[1] = {row[r]};
    float dot[1];
    warp_dot_rows_q8<T, 1>(one, groups, sm[r], lane, dot);
    out[r] = dot[0];
  }
}

// Q6_K's and Q8_0's rows through shared scratch (gpu_rows_q8_scratch.cuh, included at the end of this
// file): warp_dot_rows_q8's bits from coalesced 8-byte loads, a step of 32 groups of a row (4 Q6_K
// super-blocks, 840 bytes; 32 Q8_0 blocks, 1088 bytes) at a time through the warp's own scratch.
template <GgmlType T>
constexpr uint32_t q8_step_bytes() {
  return T == GgmlType::Q6_K ? 4 * sizeof(BlockQ6_K) : T == GgmlType::Q8_0 ? 32 * sizeof(BlockQ8_0) : 0;
}
static_assert(q8_step_bytes<GgmlType::Q6_K>() % 8 == 0 && q8_step_bytes<GgmlType::Q8_0>() % 8 == 0);

// A row's scratch: a step and 8 bytes for load_words_any's word past the last lane's bytes (Q8_0's). A
// block's: R rows a warp.
template <GgmlType T>
constexpr uint32_t q8_scratch_row_bytes() { return q8_step_bytes<T>() + 8; }
template <GgmlType T>
constexpr uint32_t q8_scratch_bytes(uint32_t r) { return kQ8Warps * r * q8_scratch_row_bytes<T>(); }

// Whether a launch of groups-wide rows of type T, R a warp, goes through scratch: a type with steps, whole
// steps, and x with the scratch within the default 48 KB with the static bytes. The launch sizes its
// shared memory by it and the kernel reads it, so both decide the same (the kernel also needs its rows
// 8-byte aligned, else warp_dot_rows_q8's loop).
template <GgmlType T>
__host__ __device__ constexpr bool q8_scratch_fits(uint32_t groups, uint32_t r) {
  return q8_step_bytes<T>() != 0 && groups % 32 == 0 &&
         q8_shared_bytes(groups) + q8_scratch_bytes<T>(r) + kQ8StaticShared <= kQ8SharedLimit;
}

template <GgmlType T, uint32_t R>
__device__ inline void warp_dot_rows_q8_scratch(const uint8_t* const (&row)[R], uint32_t groups, const uint8_t* sm,
                                                uint8_t* scratch, uint32_t lane, float (&out)[R]);

// Every row of `rows` (type T, groups 32-element groups wide) times x, or x's RMS norm times norm_w.
template <GgmlType T, uint32_t R, class Rows>
__global__ void __launch_bounds__(kQ8Warps * 32)
    matvec_q8_kernel(Rows rows, uint32_t groups, const float* x, const float* norm_w, float eps) {
  extern __shared__ uint4 q8_units[];
  uint8_t* const sm = reinterpret_cast<uint8_t*>(q8_units);
  stage_q8<T>(x, groups, sm, norm_w, eps);
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, per_block = R * (blockDim.x / 32), n = rows.count;
  for (uint32_t first = (warp * gridDim.x + blockIdx.x) * R; first < n; first += gridDim.x * per_block) {
    const uint8_t* p[R];
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) p[r] = rows.row(min(first + r, n - 1));  // a partial last set repeats the last row
    float dot[R];
    bool done = false;
    if constexpr (q8_step_bytes<T>() != 0) {
      if (q8_scratch_fits<T>(groups, R) && rows_aligned<8>(p)) {
        warp_dot_rows_q8_scratch<T, R>(p, groups, sm, sm + q8_shared_bytes(groups) + warp * R * q8_scratch_row_bytes<T>(), lane, dot);
        done = true;
      }
    }
    if (!done) warp_dot_rows_q8<T, R>(p, groups, sm, lane, dot);
    if (lane == 0) rows.template store<R>(first, dot);
  }
}

// Whether the 8-bit path takes one-token products of type t, cols wide (Q4_K, Q6_K and Q8_0 rows, x
// beside the kernels' static shared memory within the default 48 KB of a block's: Q8_0 1364 groups wide,
// 49,104 bytes of x, fits 48 KB alone but not with the 64 static bytes).
inline bool q8_rows_take(GgmlType t, uint32_t cols) {
  const bool typed = t == GgmlType::Q4_K || t == GgmlType::Q6_K || t == GgmlType::Q8_0;
  return typed && cols > 0 && cols % gguf::ggml_traits(t).block_size == 0 &&
         q8_shared_bytes(cols / kQ8Block) + kQ8StaticShared <= kQ8SharedLimit;
}

// Checks once per kernel that K's static shared memory (CUDA's count) is no more than kQ8StaticShared,
// which q8_rows_take leaves beside x: a kernel that grew some would otherwise have its widest launches
// refused with a bare "invalid argument".
template <auto K>
void require_q8_static() {
  static const bool ok = [] {
    cudaFuncAttributes a{};
    device::check_cuda(cudaFuncGetAttributes(&a, K), "cudaFuncGetAttributes (an 8-bit kernel)");
    if (a.sharedSizeBytes > kQ8StaticShared)
      throw std::logic_error("an 8-bit kernel has " + std::to_string(a.sharedSizeBytes) + " static shared bytes, q8_rows_take leaves " +
                             std::to_string(kQ8StaticShared));
    return true;
  }();
  (void)ok;
}

// Runs f.template operator()<R>() with R the rows a warp takes: 2 for a set of pairs (GluRows stores two
// rows a warp) or where `two_rows`, else 1.
template <class Rows, class F>
void with_rows_per_warp(bool two_rows, F&& f) {
  constexpr bool kPairs = [] {
    if constexpr (requires { Rows::kPairs; }) return Rows::kPairs;
    return false;
  }();
  if constexpr (kPairs) f.template operator()<2>();
  else if (two_rows) f.template operator()<2>();
  else f.template operator()<1>();
}

// Launches K (R rows a warp) over `rows` with `bytes` of dynamic shared memory, blocks capped at what the
// device holds at once (each block quantises x once, however many rows it takes).
template <auto K, uint32_t R, class Rows>
void launch_q8_rows(cudaStream_t s, const Rows& rows, uint32_t groups, uint32_t bytes, const float* x, const float* norm_w,
                    float eps) {
  require_q8_static<K>();
  const uint64_t needed = (uint64_t(rows.count) + R * kQ8Warps - 1) / (R * kQ8Warps);
  const uint32_t blocks = resident_cap<K>(uint32_t(std::min<uint64_t>(needed, 1u << 30)), 1, bytes);
  K<<<blocks, kQ8Warps * 32, bytes, s>>>(rows, groups, x, norm_w, eps);
}

// Launches matvec_q8_kernel over `rows`, R = 2 where `two_rows`.
template <class Rows>
void launch_rows_q8(cudaStream_t s, GgmlType type, const Rows& rows, uint32_t cols, const float* x, const float* norm_w,
                    float eps, bool two_rows) {
  const uint32_t groups = cols / kQ8Block;
  with_rows_per_warp<Rows>(two_rows, [&]<uint32_t R>() {
    auto go = [&]<GgmlType T>() {
      const bool scratch = q8_scratch_fits<T>(groups, R);  // the kernel's own test
      const uint32_t bytes = uint32_t(q8_shared_bytes(groups) + (scratch ? q8_scratch_bytes<T>(R) : 0));
      launch_q8_rows<matvec_q8_kernel<T, R, Rows>, R>(s, rows, groups, bytes, x, norm_w, eps);
    };
    if (type == GgmlType::Q4_K) go.template operator()<GgmlType::Q4_K>();
    else if (type == GgmlType::Q6_K) go.template operator()<GgmlType::Q6_K>();
    else go.template operator()<GgmlType::Q8_0>();
  });
}

}  // namespace gpunvme::llm::gpu

#include "examples/llm/compute/gpu_rows_q4k_q8.cuh"  // warp_dot_rows_q4k_q8_lean
#include "examples/llm/compute/gpu_rows_q8_scratch.cuh"  // warp_dot_rows_q8_scratch
