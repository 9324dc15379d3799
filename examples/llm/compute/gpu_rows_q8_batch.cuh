// The 8-bit-activation products beside the one-token kernel (gpu_rows_q8.cuh, issue 36): passes of
// several tokens, a stack's selected matrices (MoE experts) and fetched experts' rows, with the one-token
// kernel's bits for every token and row, so that a pass of any shape (speculative verification, several
// sequences, a streamed layer, an expert's grouped rows) gives each token what a pass of that token alone
// gives.
//
// Why the same bits: a (row, token) result is made of the same per-lane steps in the same order as the
// one-token kernel's warp_dot_rows_q8 (lane l: Q4_K / Q6_K slice l % 8 of super-blocks l / 8, l / 8 + 4,
// ...; Q8_0 blocks l, l + 32, ...; each step q8_dot.h's q4k_slice_dot / q6k_slice_dot / q8_0_block_dot on
// that lane's sum),
// then the same butterfly (warp_sum), and x is quantised per token by the same stage_q8 into the same
// layout. What differs is only which warp computes it and that a weight slice, read once, serves every
// token of a tile (a streamed layer's weights are read once a tile over the link, not once a token). Q4_K:
// 16-byte aligned rows by the lean loop's steps (gpu_rows_q4k_q8_batch.cuh: 8 tokens of Llama-3-8B 13.6
// instead of 20.9 ms a pass), others by those of warp_dot_rows_q8's loop for unaligned rows, whose bits
// its lean loop has too (gpu_rows_q4k_q8.cuh).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "examples/llm/compute/gpu_rows_q4k_q8_batch.cuh"
#include "examples/llm/compute/gpu_rows_q8.cuh"

namespace gpunvme::llm::gpu {

inline constexpr uint32_t kQ8TileTokens = 8;  // tokens whose sums a lane keeps at once (registers)

// A token's staged 8-bit x in a tile: q8_shared_bytes rounded up to 16 bytes (the 16-byte shared loads).
constexpr uint64_t q8_token_stride(uint32_t groups) { return (q8_shared_bytes(groups) + 15) / 16 * 16; }

// One row of type T times the m (<= kQ8TileTokens) staged vectors at sm + j * stride, by one warp:
// out[j] for j < m in every lane, each with warp_dot_rows_q8's bits for that vector.
template <GgmlType T>
__device__ inline void warp_dot_tokens_q8(const uint8_t* row, uint32_t groups, const uint8_t* sm, uint64_t stride, uint32_t m,
                                          uint32_t lane, float (&out)[kQ8TileTokens]) {
  float part[kQ8TileTokens];
#pragma unroll
  for (uint32_t j = 0; j < kQ8TileTokens; ++j) part[j] = 0.0f;
  if constexpr (T == GgmlType::Q4_K) {  // warp_dot_rows_q8's Q4_K steps (its lean loop has their bits)
    const uint32_t s = lane % 8, blocks = groups / 8;
    for (uint32_t b = lane / 8; b < blocks; b += 4) {
      const uint8_t* blk = row + uint64_t(b) * sizeof(BlockQ4_K);
      uint32_t head[4], q[4];
      load_words<4>(blk, head);
      load_words<4>(blk + 16 * (1 + s), q);
#pragma unroll
      for (uint32_t j = 0; j < kQ8TileTokens; ++j)
        if (j < m) part[j] += q4k_slice_dot(head, q, staged_slice(sm + j * stride, groups, b, s), s);
    }
  } else if constexpr (T == GgmlType::Q6_K) {
    const uint32_t s = lane % 8, blocks = groups / 8;
    for (uint32_t b = lane / 8; b < blocks; b += 4) {
      const Q6kSlice w = q6k_slice(row + uint64_t(b) * sizeof(BlockQ6_K), s);
#pragma unroll
      for (uint32_t j = 0; j < kQ8TileTokens; ++j)
        if (j < m) part[j] = q6k_slice_dot(w, staged_slice6(sm + j * stride, groups, b, s), part[j]);
    }
  } else {
    static_assert(T == GgmlType::Q8_0);
    for (uint32_t g = lane; g < groups; g += 32) {
      const uint8_t* blk = row + uint64_t(g) * sizeof(BlockQ8_0);
      uint32_t q[8];
      load_words_any<8>(blk + 2, q);
      const uint16_t dw = *reinterpret_cast<const uint16_t*>(blk);
#pragma unroll
      for (uint32_t j = 0; j < kQ8TileTokens; ++j) {
        if (j >= m) break;
        const uint8_t* t = sm + j * stride;
        const uint4 a = reinterpret_cast<const uint4*>(t)[g], c = reinterpret_cast<const uint4*>(t + 16 * uint64_t(groups))[g];
        const uint32_t xv[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
        part[j] = q8_0_block_dot(dw, q, xv, reinterpret_cast<const float*>(t + 32 * uint64_t(groups))[g], part[j]);
      }
    }
  }
#pragma unroll
  for (uint32_t j = 0; j < kQ8TileTokens; ++j)
    if (j < m) out[j] = warp_sum(part[j]);  // m is the same for the whole warp
}

// Y[n x rows] = X[n x cols] W^T (+ bias), W matrix *sel of a stack (mat_bytes apart) where sel is given:
// blocks along y take tiles of `tile` tokens (<= kQ8TileTokens), stage their 8-bit x side by side, and
// their warps stride over the rows, a row at a time for every token of the tile.
template <GgmlType T, uint32_t kThreads = kQ8Warps * 32>
__global__ void __launch_bounds__(kThreads, T == GgmlType::Q4_K ? 512 / kThreads : 1)
    matmul_q8_kernel(const uint8_t* w, uint64_t row_bytes, uint32_t rows, uint32_t cols, const float* x, uint32_t n, uint32_t tile,
                     const float* bias, const uint32_t* sel, uint64_t mat_bytes, float* y) {
  extern __shared__ uint4 q8_tile_units[];
  uint8_t* const sm = reinterpret_cast<uint8_t*>(q8_tile_units);
  const uint32_t groups = cols / kQ8Block, warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const uint64_t stride = q8_token_stride(groups);
  if (sel) w += uint64_t(*sel) * mat_bytes;
  const bool lean = T == GgmlType::Q4_K && (reinterpret_cast<uintptr_t>(w) | row_bytes) % 16 == 0;
  for (uint32_t t0 = blockIdx.y * tile; t0 < n; t0 += gridDim.y * tile) {
    const uint32_t m = min(tile, n - t0);
    __syncthreads();  // the previous tile's vectors are read
    if constexpr (T == GgmlType::Q4_K) {  // the tile in one pass (measured for Q4_K only)
      stage_q8_vectors<T>(x + uint64_t(t0) * cols, cols, m, groups, sm, stride, nullptr, 0.0f);
      if (lean) {
        q4k_tokens_lean<kQ8TileTokens>(w, row_bytes, rows, groups, sm, stride, m, bias, y + uint64_t(t0) * rows);
        continue;
      }
    } else {  // a vector at a time (Q6_K 8 tokens: 16.5 ms a pass, 17.4 in one pass; call C)
      for (uint32_t j = 0; j < m; ++j) stage_q8<T>(x + uint64_t(t0 + j) * cols, groups, sm + j * stride, nullptr, 0.0f);
    }
    for (uint32_t r = warp * gridDim.x + blockIdx.x; r < rows; r += gridDim.x * warps) {
      float dot[kQ8TileTokens];
      warp_dot_tokens_q8<T>(w + uint64_t(r) * row_bytes, groups, sm, stride, m, lane, dot);
      if (lane != 0) continue;
      const float b = bias ? bias[r] : 0.0f;  // MatrixRows's expression: dot + (bias or 0)
      for (uint32_t j = 0; j < m; ++j) y[uint64_t(t0 + j) * rows + r] = dot[j] + b;
    }
  }
}

// Every row of `rows` times the staged x at sm by the block's warps, R rows a warp (matvec_q8_kernel's
// loop): for kernels that stage x themselves (a selected matrix, a fetched expert's rows).
template <GgmlType T, uint32_t R>
__device__ inline void q8_matrix_rows(const MatrixRows& rows, uint32_t groups, const uint8_t* sm) {
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, per_block = R * (blockDim.x / 32), n = rows.count;
  for (uint32_t first = (warp * gridDim.x + blockIdx.x) * R; first < n; first += gridDim.x * per_block) {
    const uint8_t* p[R];
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) p[r] = rows.row(min(first + r, n - 1));
    float dot[R];
    warp_dot_rows_q8<T, R>(p, groups, sm, lane, dot);
    if (lane == 0) rows.template store<R>(first, dot);
  }
}

// blockIdx.y = j: matrix sel[j] of a stack (or w itself without sel) times x + j * x_stride into
// y + j * y_stride (gpu_matvec_selected: the k routed experts' projections in one launch).
template <GgmlType T, uint32_t R>
__global__ void __launch_bounds__(kQ8Warps * 32)
    matvec_q8_selected_kernel(const uint8_t* w, uint64_t row_bytes, uint32_t rows, uint32_t groups, const float* x, uint64_t x_stride,
                              const float* bias, const uint32_t* sel, uint64_t mat_bytes, float* y, uint64_t y_stride) {
  extern __shared__ uint4 q8_sel_units[];
  uint8_t* const sm = reinterpret_cast<uint8_t*>(q8_sel_units);
  if (sel) w += uint64_t(sel[blockIdx.y]) * mat_bytes;
  stage_q8<T>(x + blockIdx.y * x_stride, groups, sm, nullptr, 0.0f);
  q8_matrix_rows<T, R>(MatrixRows{w, row_bytes, rows, bias, y + blockIdx.y * y_stride}, groups, sm);
}

// Runs f.template operator()<T>() for the types the 8-bit kernels take (q8_rows_take's).
template <class F>
void with_q8_type(GgmlType t, F&& f) {
  if (t == GgmlType::Q4_K) f.template operator()<GgmlType::Q4_K>();
  else if (t == GgmlType::Q6_K) f.template operator()<GgmlType::Q6_K>();
  else f.template operator()<GgmlType::Q8_0>();
}

// matmul_q8_kernel over n tokens: tiles of up to kQ8TileTokens vectors, as many as fit the block's shared
// memory; blocks along x capped at what the device holds at once beside the tiles along y.
inline void launch_matmul_q8(cudaStream_t s, GgmlType type, const uint8_t* w, uint64_t row_bytes, uint32_t rows, uint32_t cols,
                             const float* x, uint32_t n, const float* bias, const uint32_t* sel, uint64_t mat_bytes, float* y) {
  if (n == 0 || rows == 0) return;
  const uint64_t stride = q8_token_stride(cols / kQ8Block);
  with_q8_type(type, [&]<GgmlType T>() {
    // Launches K with kThreads a block, unless `wider` and its blocks would not put more warps on an SM.
    auto go = [&]<uint32_t kThreads>(bool wider) {
      constexpr auto K = matmul_q8_kernel<T, kThreads>;
      const uint32_t room = allow_staged_shared<K>();
      const uint32_t tile = uint32_t(std::clamp<uint64_t>(room / stride, 1, std::min(kQ8TileTokens, n)));
      const uint32_t tiles = (n + tile - 1) / tile, bytes = uint32_t(tile * stride);
      if (wider) {
        constexpr auto narrow = matmul_q8_kernel<T>;
        const uint64_t held = uint64_t(resident_cap<K, kThreads>(1u << 30, 1, bytes)) * kThreads;  // threads on the device
        if (held <= uint64_t(resident_cap<narrow>(1u << 30, 1, bytes)) * kQ8Warps * 32) return false;
      }
      const uint32_t blocks = resident_cap<K, kThreads>((rows + kThreads / 32 - 1) / (kThreads / 32), tiles, bytes);
      K<<<dim3(blocks, tiles), kThreads, bytes, s>>>(w, row_bytes, rows, cols, x, n, tile, bias, sel, mat_bytes, y);
      return true;
    };
    // Q4_K: 512-thread blocks where they hold more warps an SM (x's tile fills its shared memory for one
    // 256-thread block: 8 vectors of a 14336-wide down projection).
    if constexpr (T == GgmlType::Q4_K) {
      if (go.template operator()<512>(true)) return;
    }
    go.template operator()<kQ8Warps * 32>(false);
  });
}

// matvec_q8_selected_kernel for `count` products (blockIdx.y).
inline void launch_matvec_q8_selected(cudaStream_t s, GgmlType type, const uint8_t* w, uint64_t row_bytes, uint32_t rows, uint32_t cols,
                                      uint32_t count, const float* x, uint64_t x_stride, const float* bias, const uint32_t* sel,
                                      uint64_t mat_bytes, float* y, uint64_t y_stride, bool two_rows) {
  if (count == 0 || rows == 0) return;
  const uint32_t groups = cols / kQ8Block, bytes = uint32_t(q8_shared_bytes(groups));
  with_q8_type(type, [&]<GgmlType T>() {
    auto go = [&]<uint32_t R>() {
      constexpr auto K = matvec_q8_selected_kernel<T, R>;
      require_q8_static<K>();
      const uint32_t blocks = resident_cap<K>((rows + R * kQ8Warps - 1) / (R * kQ8Warps), count, bytes);
      K<<<dim3(blocks, count), kQ8Warps * 32, bytes, s>>>(w, row_bytes, rows, groups, x, x_stride, bias, sel, mat_bytes, y, y_stride);
    };
    if (two_rows) go.template operator()<2>();
    else go.template operator()<1>();
  });
}

}  // namespace gpunvme::llm::gpu
