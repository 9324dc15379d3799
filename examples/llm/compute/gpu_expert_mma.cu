#include "examples/llm/compute/gpu_expert_mma.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <stdexcept>
#include <string>

#include "device/cuda_check.h"
#include "examples/llm/quant/dequant.h"
#include "examples/llm/quant/weight_types.h"

namespace gpunvme::llm {
namespace {

namespace wmma = nvcuda::wmma;

constexpr uint32_t kM = kExpertTileRows, kN = kExpertTileTokens;
constexpr uint32_t kWarps = kM / 16;    // a warp per 16 weight rows, over all of the tile's tokens
constexpr uint32_t kThreads = kWarps * 32;
constexpr uint32_t kGroupsPerThread = 1;  // dequantizations per thread and step (in registers across the step's products)
constexpr uint32_t kK = kThreads * kGroupsPerThread / kM * kGroup;  // columns per step (64)
constexpr uint32_t kLd = kK + 8;        // 16-bit elements per staged row: the padding spreads the banks
constexpr uint32_t kLdC = kM + 4;       // floats per token of the staged outputs
constexpr uint32_t kStage = 2 * kM * kLd;  // one step's weights (as) and tokens (bs), in 16-bit elements
static_assert(kK % 16 == 0 && kThreads * kGroupsPerThread == kM * kK / kGroup, "each thread dequantizes its groups of a step");
static_assert(kN * kLdC * sizeof(float) <= 2 * kStage * 2, "the staged outputs fit over the staged inputs");

// 16 bytes global -> shared without registers (sm_80+), the bytes past src_bytes (0 or 16) as zeros.
__device__ inline void cp_async_16_zfill(void* shared_dst, const void* global_src, uint32_t src_bytes) {
  const uint32_t dst = uint32_t(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src), "r"(src_bytes) : "memory");
}
__device__ inline void cp_async_commit_wait_all() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

template <GemmElem E>
struct Elem;
template <>
struct Elem<GemmElem::kF16> {
  using T = __half;
  __device__ static uint32_t pack(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};
template <>
struct Elem<GemmElem::kBF16> {
  using T = __nv_bfloat16;
  __device__ static uint32_t pack(float a, float b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

// The tile's expert's matrix: in its stack, or its part in the fetcher's scratchpad (null: none usable).
__device__ const uint8_t* expert_matrix(const ExpertWeights& m, const ExpertTile& t) {
  if (!m.ex) return m.w + uint64_t(t.expert) * m.mat_bytes;
  const stream::GpuFetchedExpert& e = m.ex[m.selection[t.slot]];
  if (e.failed != 0 || e.expert != t.expert) return nullptr;
  const uint64_t off = stream::find_part(e, m.proj, uint64_t(m.rows) * m.row_bytes);
  return off == stream::kNoPart ? nullptr : m.scratch + off;
}

// One group of row `row` (zeros beyond the matrix) as 32 16-bit elements in registers (dequant_group,
// the one decoder of every type), stored to shared memory after the step's products (store_group).
template <GgmlType T, GemmElem E>
__device__ inline void load_group(const ExpertWeights& m, const uint8_t* w, uint32_t row, uint32_t g, uint4 (&d)[kGroup / 8]) {
  float v[kGroup];
  if (row < m.rows && g < m.cols / kGroup) {
    dequant_group<T>(w + uint64_t(row) * m.row_bytes, g, v);
  } else {
#pragma unroll
    for (uint32_t i = 0; i < kGroup; ++i) v[i] = 0.0f;
  }
#pragma unroll
  for (uint32_t q = 0; q < kGroup / 8; ++q)
    d[q] = make_uint4(Elem<E>::pack(v[8 * q], v[8 * q + 1]), Elem<E>::pack(v[8 * q + 2], v[8 * q + 3]),
                      Elem<E>::pack(v[8 * q + 4], v[8 * q + 5]), Elem<E>::pack(v[8 * q + 6], v[8 * q + 7]));
}
template <class H>
__device__ inline void store_group(const uint4 (&d)[kGroup / 8], H* dst) {
#pragma unroll
  for (uint32_t q = 0; q < kGroup / 8; ++q) reinterpret_cast<uint4*>(dst)[q] = d[q];
}

// The tile's tokens' columns [k0, k0 + kK) into bs by cp.async (columns past the row as zeros: the
// weights' there are zeros, and 0 x garbage could be NaN). Only the tile's tokens: an output column
// depends on its own token's column alone, so the columns past them (never stored) may hold anything.
template <class H>
__device__ inline void load_tokens(const ExpertWeights& m, const ExpertTile& tile, const H* xh, uint32_t k0, H* bs) {
  for (uint32_t i = threadIdx.x; i < tile.count * (kK / 8); i += kThreads) {
    const uint32_t t = i / (kK / 8), c = i % (kK / 8) * 8;
    const bool in = k0 + c < m.cols;
    cp_async_16_zfill(bs + t * kLd + c, xh + uint64_t(tile.row0 + t) * m.cols + (in ? k0 + c : 0), in ? 16u : 0u);
  }
}

// Block (blockIdx.x, blockIdx.y): weight rows [64 x, 64 x + 64) of tile y's expert times its tokens
// (a tile of no tokens: nothing; launches sized by a bound have such tiles at their end). Each step
// stages kK columns in one of two buffers while the warps multiply the other's (one barrier a step):
// thread i dequantizes group i % 2 of the step in row i / 2 into registers before the products of the
// step before and stores it after them (rows beyond the matrix, columns beyond the row as zeros), and the
// tokens' 16-bit columns go by cp.async; warp w multiplies rows [16 w, 16 w + 16) by the 64 tokens, 16
// columns at a time, in column order whatever kK is (so the sums, and the bits, do not depend on it).
// The outputs are staged over the inputs at the end.
template <GgmlType T, GemmElem E>
__global__ void __launch_bounds__(kThreads) expert_mma_kernel(ExpertWeights m, const ExpertTile* tiles,
                                                              const typename Elem<E>::T* xh, const float* scale,
                                                              const float* bias, float* y) {
  using H = typename Elem<E>::T;
  __shared__ __align__(128) H staged[2 * kStage];
  float* cs = reinterpret_cast<float*>(staged);
  const ExpertTile tile = tiles[blockIdx.y];
  if (tile.count == 0) return;
  const uint32_t r0 = blockIdx.x * kM, warp = threadIdx.x / 32;
  const uint8_t* w = expert_matrix(m, tile);
  if (!w) {  // the whole block: every thread found the same
    for (uint32_t i = threadIdx.x; i < kN * kM; i += kThreads) {
      const uint32_t t = i / kM, r = r0 + i % kM;
      if (t < tile.count && r < m.rows) y[uint64_t(tile.row0 + t) * m.rows + r] = NAN;
    }
    return;
  }
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kN / 16];
#pragma unroll
  for (uint32_t j = 0; j < kN / 16; ++j) wmma::fill_fragment(acc[j], 0.0f);
  constexpr uint32_t kRowThreads = kThreads / kM;  // threads per staged row
  const uint32_t ar = threadIdx.x / kRowThreads, ag = threadIdx.x % kRowThreads * kGroupsPerThread;
  uint4 d[kGroupsPerThread][kGroup / 8];
  // The first step's inputs.
  load_tokens(m, tile, xh, 0, staged + kM * kLd);
#pragma unroll
  for (uint32_t q = 0; q < kGroupsPerThread; ++q) {
    load_group<T, E>(m, w, r0 + ar, ag + q, d[q]);
    store_group(d[q], staged + ar * kLd + (ag + q) * kGroup);
  }
  cp_async_commit_wait_all();
  __syncthreads();
  const uint32_t steps = (m.cols + kK - 1) / kK;
  for (uint32_t s = 0; s < steps; ++s) {
    const H* as = staged + (s & 1) * kStage;
    const H* bs = as + kM * kLd;
    H* next = staged + ((s + 1) & 1) * kStage;  // read by the step before, which every warp has finished
    const bool more = s + 1 < steps;
    if (more) {
      const uint32_t k1 = (s + 1) * kK;
      load_tokens(m, tile, xh, k1, next + kM * kLd);
#pragma unroll
      for (uint32_t q = 0; q < kGroupsPerThread; ++q) load_group<T, E>(m, w, r0 + ar, k1 / kGroup + ag + q, d[q]);
    }
#pragma unroll
    for (uint32_t kk = 0; kk < kK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, H, wmma::row_major> a;
      wmma::load_matrix_sync(a, as + warp * 16 * kLd + kk, kLd);
#pragma unroll
      for (uint32_t j = 0; j < kN / 16; ++j) {
        if (j * 16 >= tile.count) break;  // the same for the whole block: no token in these 16 columns
        wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::col_major> b;
        wmma::load_matrix_sync(b, bs + j * 16 * kLd + kk, kLd);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
    if (more) {
#pragma unroll
      for (uint32_t q = 0; q < kGroupsPerThread; ++q) store_group(d[q], next + ar * kLd + (ag + q) * kGroup);
    }
    cp_async_commit_wait_all();
    __syncthreads();
  }
  // cs[t * kLdC + r]: token t's output for row r0 + r, so that the stores below run along the rows
  // (over the staged inputs, which every warp has finished reading at the loop's last barrier).
#pragma unroll
  for (uint32_t j = 0; j < kN / 16; ++j) wmma::store_matrix_sync(cs + j * 16 * kLdC + warp * 16, acc[j], kLdC, wmma::mem_col_major);
  __syncthreads();
  const float* b = bias ? bias + uint64_t(tile.expert) * m.rows : nullptr;
  for (uint32_t i = threadIdx.x; i < kN * kM; i += kThreads) {
    const uint32_t t = i / kM, r = i % kM;
    if (t < tile.count && r0 + r < m.rows)
      y[uint64_t(tile.row0 + t) * m.rows + r0 + r] = cs[t * kLdC + r] * scale[tile.row0 + t] + (b ? b[r0 + r] : 0.0f);
  }
}

}  // namespace

void gpu_expert_products(gpu_stream_t stream, const ExpertWeights& m, const ExpertTile* tiles, uint32_t n_tiles, const void* xh,
                         const float* scale, const float* bias, float* y) {
  if (n_tiles == 0) return;
  if (m.cols == 0 || m.cols % kGroup != 0 || n_tiles > 65535)
    throw std::logic_error("gpu_expert_products: " + std::to_string(n_tiles) + " tiles of rows " + std::to_string(m.cols) +
                           " wide (1..65535 tiles, a whole number of 32-element groups)");
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  const dim3 grid((m.rows + kM - 1) / kM, n_tiles);
  with_weight_type(m.type, [&](auto type) {
    constexpr GgmlType T = decltype(type)::value;
    constexpr GemmElem E = gemm_elem_for(T);
    expert_mma_kernel<T, E><<<grid, kThreads, 0, s>>>(m, tiles, static_cast<const typename Elem<E>::T*>(xh), scale, bias, y);
  });
  device::check_cuda(cudaGetLastError(), "grouped expert tensor-core kernel");
}

}  // namespace gpunvme::llm
