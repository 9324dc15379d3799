#include "examples/llm/compute/gpu_matmul.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "device/cuda_check.h"
#include "examples/llm/compute/gpu_warp.cuh"

namespace gpunvme::llm {
namespace {

using gpu::warp_dot_row;
using gpu::warp_sum;

constexpr uint32_t kRowsPerBlock = 8;  // matvec: one warp per row, 8 warps per block
constexpr uint32_t kTile = 8;          // batched: tokens whose sums a lane keeps in registers at once
constexpr uint32_t kPad = kGroup + 1;  // a group in shared memory, padded: the lanes of a warp read
                                       // groups lane, lane+32, ... at once, one bank each
constexpr uint32_t kChunk = 32;        // batched: groups of the tokens' vectors staged at once (one per lane)
constexpr uint64_t kStageBytes = uint64_t(kTile) * kChunk * kPad * sizeof(float);
constexpr uint64_t kSmemTarget = 96u << 10;  // shared memory a block of the batched kernel aims at

// y[r] = W[r] . x (+ bias[r]); one warp per row. With `sel`, W is matrix *sel of a stack of mat_bytes each.
__global__ void matvec_kernel(GgmlType t, const uint8_t* w, uint64_t row_bytes, uint32_t rows, uint32_t cols,
                              const float* x, const float* bias, const uint32_t* sel, uint64_t mat_bytes, float* y) {
  const uint32_t row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  if (sel) w += uint64_t(*sel) * mat_bytes;
  const float dot = warp_dot_row(t, w + uint64_t(row) * row_bytes, cols, x, lane);
  if (lane == 0) y[row] = dot + (bias ? bias[row] : 0.0f);
}

// Y[n x rows] = X[n x cols] W^T (+ bias): one warp per row, a block of `warps` rows. Each warp dequantizes
// its row once into shared memory (lane i groups i, i+32, ..., as matvec_kernel's lanes). Then, for kTile
// tokens at a time, the block stages their vectors 32 groups at a time in shared memory (coalesced global
// loads, shared by every row of the block, read without bank conflicts), lane i sums group i of the
// chunk against each token exactly as warp_dot_row sums its group, and after the last chunk the warp
// adds the lanes' sums by the same butterfly: every result has matvec_kernel's bits.
__global__ void matmul_kernel(GgmlType t, const uint8_t* w, uint64_t row_bytes, uint32_t rows, uint32_t cols,
                              const float* x, uint32_t n, const float* bias, const uint32_t* sel, uint64_t mat_bytes,
                              float* y) {
  extern __shared__ float smem[];
  const uint32_t warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t row = blockIdx.x * warps + warp, groups = cols / kGroup;
  const bool active = row < rows;  // an idle warp still takes part in the block's staging and barriers
  float* ws = smem + uint64_t(warp) * groups * kPad;
  float* xs = smem + uint64_t(warps) * groups * kPad;  // [kTile][kChunk groups][kPad]
  if (sel) w += uint64_t(*sel) * mat_bytes;
  if (active) {
    const uint8_t* r = w + uint64_t(row) * row_bytes;
    for (uint32_t grp = lane; grp < groups; grp += 32) {
      float g[kGroup];
      dequant_group(t, r, grp, g);
      for (int l = 0; l < kGroup; ++l) ws[grp * kPad + l] = g[l];
    }
  }
  __syncwarp();
  const float b = active && bias ? bias[row] : 0.0f;
  for (uint32_t t0 = 0; t0 < n; t0 += kTile) {
    const uint32_t m = min(kTile, n - t0);
    float part[kTile];
#pragma unroll
    for (uint32_t j = 0; j < kTile; ++j) part[j] = 0.0f;
    for (uint32_t g0 = 0; g0 < groups; g0 += kChunk) {
      const uint32_t cg = min(kChunk, groups - g0), span = cg * kGroup;
      __syncthreads();  // the previous chunk is read
      for (uint32_t i = threadIdx.x; i < m * span; i += blockDim.x) {
        const uint32_t j = i / span, e = i % span;
        xs[(j * kChunk + e / kGroup) * kPad + e % kGroup] = x[uint64_t(t0 + j) * cols + uint64_t(g0) * kGroup + e];
      }
      __syncthreads();
      if (!active || lane >= cg) continue;
      const float* wg = ws + (g0 + lane) * kPad;
#pragma unroll
      for (uint32_t j = 0; j < kTile; ++j) {
        if (j >= m) break;
        const float* xg = xs + (j * kChunk + lane) * kPad;
        float s = 0.0f;
        for (int l = 0; l < kGroup; ++l) s += wg[l] * xg[l];
        part[j] += s;
      }
    }
#pragma unroll
    for (uint32_t j = 0; j < kTile; ++j) {
      const float d = warp_sum(part[j]);  // every lane takes part in every shuffle
      if (active && lane == 0 && j < m) y[uint64_t(t0 + j) * rows + row] = d + b;
    }
  }
}

uint32_t blocks_for(uint64_t n, uint32_t per_block) { return uint32_t((n + per_block - 1) / per_block); }

// The most dynamic shared memory a block may use on this device (opted in once for matmul_kernel).
uint64_t smem_limit() {
  static const uint64_t limit = [] {
    int dev = 0, optin = 0;
    device::check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
    device::check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "shared memory limit");
    device::check_cuda(cudaFuncSetAttribute(matmul_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin),
                       "shared memory opt-in of the batched matrix kernel");
    return uint64_t(optin);
  }();
  return limit;
}

void matvec(cudaStream_t s, const GpuMatrix& m, const float* x, const float* bias, float* y) {
  matvec_kernel<<<blocks_for(m.rows, kRowsPerBlock), kRowsPerBlock * 32, 0, s>>>(m.type, m.w, m.row_bytes, m.rows, m.cols,
                                                                                 x, bias, m.sel, m.mat_bytes, y);
}

}  // namespace

void gpu_matmul_batched(gpu_stream_t stream, const GpuMatrix& m, const float* x, uint32_t n, const float* bias, float* y) {
  auto s = reinterpret_cast<cudaStream_t>(stream);
  const uint64_t per_warp = uint64_t(m.cols / kGroup) * kPad * sizeof(float);
  if (per_warp + kStageBytes > smem_limit()) {  // a row too wide for shared memory: token by token, the same bits
    for (uint32_t t = 0; t < n; ++t) matvec(s, m, x + uint64_t(t) * m.cols, bias, y + uint64_t(t) * m.rows);
    return;
  }
  const uint64_t room = kSmemTarget > kStageBytes ? kSmemTarget - kStageBytes : 0;
  const uint32_t warps = uint32_t(std::clamp<uint64_t>(room / per_warp, 1, kRowsPerBlock));
  matmul_kernel<<<blocks_for(m.rows, warps), warps * 32, warps * per_warp + kStageBytes, s>>>(
      m.type, m.w, m.row_bytes, m.rows, m.cols, x, n, bias, m.sel, m.mat_bytes, y);
}

void gpu_matmul(gpu_stream_t stream, const GpuMatrix& m, const float* x, uint32_t n, const float* bias, float* y) {
  if (n == 1) return matvec(reinterpret_cast<cudaStream_t>(stream), m, x, bias, y);
  gpu_matmul_batched(stream, m, x, n, bias, y);
}

}  // namespace gpunvme::llm
