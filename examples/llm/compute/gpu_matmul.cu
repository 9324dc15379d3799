#include "examples/llm/compute/gpu_matmul.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <string>

#include "device/cuda_check.h"
#include "examples/llm/compute/gpu_rows.cuh"
#include "examples/llm/compute/gpu_rows_q8.cuh"
#include "examples/llm/compute/gpu_rows_q8_batch.cuh"
#include "examples/llm/compute/gpu_warp.cuh"
#include "examples/llm/compute/ops.h"
#include "examples/llm/compute/q8_types.h"

namespace gpunvme::llm {
namespace {

using gpu::warp_dot_row;
using gpu::warp_sum;
using gpu::with_weight_type;

constexpr uint32_t kRowsPerBlock = 8;  // warps per block (both kernels); the unstaged kernel: one row a warp
constexpr uint32_t kBatchRows = 2;     // batched: rows a warp
constexpr uint32_t kTile = kBatchTileTokens;  // batched: tokens whose sums a lane keeps in registers at once
constexpr uint32_t kPad = kGroup + 1;  // a group in shared memory, padded: the lanes of a warp read
                                       // groups lane, lane+32, ... at once, one bank each
constexpr uint32_t kChunk = 32;        // batched: groups of the tokens' vectors staged at once (one per lane)
constexpr uint32_t kStageFloats = kTile * kChunk * kPad;  // 33.8 KB: under the default 48 KB, no opt-in

// GPUNVME_MATVEC_Q8 (gpu_matmul.h, its grammar and default in q8_types.h): bit i for kQ8Types[i]; -1 until read.
std::atomic<int> q8_mask{-1};

int q8_types_on() {
  int v = q8_mask.load(std::memory_order_relaxed);
  if (v >= 0) return v;
  v = int(q8_types_setting(std::getenv("GPUNVME_MATVEC_Q8")));
  q8_mask.store(v, std::memory_order_relaxed);
  return v;
}

// Whether products of type t, cols wide, take the 8-bit path (switched on for t, and taken).
bool q8_takes(GgmlType t, uint32_t cols) {
  const int on = q8_types_on();
  for (size_t i = 0; i < std::size(kQ8Types); ++i)
    if (kQ8Types[i] == t) return ((on >> i) & 1) != 0 && gpu::q8_rows_take(t, cols);
  return false;
}

// y[r] = W[r] . x (+ bias[r]); one warp per row, x read from global memory: the fallback for rows too wide
// for x to fit in shared memory, and the reference the staged kernel is held equal to.
// With `sel`, W is matrix *sel of a stack of mat_bytes each. blockIdx.y = j > 0 (gpu_matvec_selected):
// matrix sel[j], vector x + j * x_stride, into y + j * y_stride.
template <GgmlType T>
__global__ void matvec_kernel(const uint8_t* w, uint64_t row_bytes, uint32_t rows, uint32_t cols, const float* x,
                              const float* bias, const uint32_t* sel, uint64_t mat_bytes, float* y,
                              uint64_t x_stride = 0, uint64_t y_stride = 0) {
  const uint32_t row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  x += blockIdx.y * x_stride;
  y += blockIdx.y * y_stride;
  if (sel) w += uint64_t(sel[blockIdx.y]) * mat_bytes;
  const float dot = warp_dot_row<T>(w + uint64_t(row) * row_bytes, cols, x, lane);
  if (lane == 0) y[row] = dot + (bias ? bias[row] : 0.0f);
}

// The same products with x staged in shared memory and R rows per warp (gpu_rows.cuh): the same bits.
template <GgmlType T, uint32_t R>
__global__ void __launch_bounds__(gpu::kStagedWarps * 32, gpu::kStagedMinBlocks)
    matvec_staged_kernel(const uint8_t* w, uint64_t row_bytes, uint32_t rows, uint32_t cols, const float* x,
                         const float* bias, const uint32_t* sel, uint64_t mat_bytes, float* y, uint64_t x_stride,
                         uint64_t y_stride) {
  extern __shared__ float4 xs[];
  x += blockIdx.y * x_stride;
  y += blockIdx.y * y_stride;
  if (sel) w += uint64_t(sel[blockIdx.y]) * mat_bytes;
  gpu::block_rows<T, R>(w, row_bytes, rows, cols / kGroup, x, xs, bias, y);
}

// The staged kernel's products (MatrixRows: into rows.y), then y += RMS norm of rows.y times norm_w by
// the launch's last block to finish (gpu_matvec_norm_add): each block's stores of its rows are made
// visible device-wide (__threadfence) before it counts itself done, so the last one reads every row; it
// then resets the counter for the next launch.
template <GgmlType T, uint32_t R>
__global__ void __launch_bounds__(gpu::kStagedWarps * 32, gpu::kStagedMinBlocks)
    matvec_norm_add_kernel(gpu::MatrixRows rows, uint32_t groups, const float* x, const float* norm_w, float eps, float* y,
                           uint32_t* done) {
  static_assert(gpu::kStagedWarps * 32 == gpu::kNormThreads, "the norm's scale must be summed as the norm kernel sums it");
  extern __shared__ float4 xs[];
  gpu::block_rows<T, R>(rows, groups, x, xs);
  if (!gpu::last_to_finish(done)) return;
  gpu::norm_add_block(y, rows.y, norm_w, rows.count, eps);
  if (threadIdx.x == 0) *done = 0;
}

__global__ void glu_kernel(float* gate, const float* up, uint32_t n, FfnAct a) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) gate[i] = glu(a, gate[i], up[i]);
}

// Any row set of gpu_rows.cuh's block_rows (the fused products below) by the staged kernel.
template <GgmlType T, uint32_t R, class Rows>
__global__ void __launch_bounds__(gpu::kStagedWarps * 32, gpu::kStagedMinBlocks)
    matvec_rows_kernel(Rows rows, uint32_t groups, const float* x, const float* norm_w, float eps) {
  extern __shared__ float4 xs[];
  gpu::block_rows<T, R>(rows, groups, x, xs, norm_w, eps);
}

// Up to kMaxFused matrices' rows one after another (matrix 0's, then 1's, ...), each result into its own
// matrix's output with its bias: Q, K and V in one launch. Parts past `parts` repeat part 0's matrix and
// are never picked (end[] of them is count). Fixed-index picks, not an indexed array: a kernel parameter
// indexed at run time would be copied to local memory.
constexpr uint32_t kMaxFused = 3;
struct ConcatRows {
  static constexpr bool kPairs = false;
  const uint8_t* w[kMaxFused];
  uint64_t row_bytes[kMaxFused];
  uint32_t end[kMaxFused];  // rows of parts 0 .. p, summed
  const float* bias[kMaxFused];
  float* y[kMaxFused];
  uint32_t count;
  template <class V>
  __device__ static V pick(uint32_t p, V a, V b, V c) { return p == 0 ? a : p == 1 ? b : c; }
  __device__ uint32_t part(uint32_t i) const { return i < end[0] ? 0 : i < end[1] ? 1 : 2; }
  __device__ uint32_t start(uint32_t p) const { return pick(p, 0u, end[0], end[1]); }
  __device__ const uint8_t* row(uint32_t i) const {
    const uint32_t p = part(i);
    return pick(p, w[0], w[1], w[2]) + uint64_t(i - start(p)) * pick(p, row_bytes[0], row_bytes[1], row_bytes[2]);
  }
  template <GgmlType T>
  __device__ bool stageable() const {
    return gpu::weight_rows_stageable<T>(w[0], row_bytes[0]) && gpu::weight_rows_stageable<T>(w[1], row_bytes[1]) &&
           gpu::weight_rows_stageable<T>(w[2], row_bytes[2]);
  }
  template <uint32_t R>
  __device__ void store(uint32_t first, const float (&dot)[R]) const {
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) {
      const uint32_t i = first + r;
      if (i >= count) continue;
      const uint32_t p = part(i), at = i - start(p);
      const float* b = pick(p, bias[0], bias[1], bias[2]);
      pick(p, y[0], y[1], y[2])[at] = dot[r] + (b ? b[at] : 0.0f);  // MatrixRows's expression: the same bits
    }
  }
};

// A gated FFN's gate and up rows interleaved (row 2r: gate row r, row 2r + 1: up row r), two a warp, so
// that one warp holds both products of r and its lane 0 writes glu(act, gate, up) (ops.h) for it. The
// operands are what gpu_matmul would have written for them (dot + 0.0f, no bias), so y has the bits of
// the products and then the element-wise GLU kernel.
struct GluRows {
  static constexpr bool kPairs = true;
  const uint8_t *gate, *up;
  uint64_t row_bytes;
  uint32_t count;  // 2 x the rows of each
  FfnAct act;
  float* y;
  __device__ const uint8_t* row(uint32_t i) const { return ((i & 1) ? up : gate) + uint64_t(i >> 1) * row_bytes; }
  template <GgmlType T>
  __device__ bool stageable() const {
    return gpu::weight_rows_stageable<T>(gate, row_bytes) && gpu::weight_rows_stageable<T>(up, row_bytes);
  }
  template <uint32_t R>
  __device__ void store(uint32_t first, const float (&dot)[R]) const {
    static_assert(R == 2, "a warp holds a gate row and its up row");
    y[first / 2] = glu(act, dot[0] + 0.0f, dot[1] + 0.0f);  // first is even and count is: both rows are real
  }
};

// Stages tokens t0 .. t0+m of X, columns of groups g0 .. g0+cg, into xs[token][group][kPad] with the
// whole block: consecutive threads take consecutive floats (coalesced loads, conflict-free stores).
__device__ inline void stage_chunk(const float* x, uint32_t cols, uint32_t t0, uint32_t m, uint32_t g0, uint32_t cg,
                                   float* xs) {
  const uint32_t span = cg * kGroup;
  for (uint32_t j = 0; j < m; ++j) {
    const float* src = x + uint64_t(t0 + j) * cols + uint64_t(g0) * kGroup;
    float* dst = xs + j * kChunk * kPad;
    for (uint32_t e = threadIdx.x; e < span; e += blockDim.x) dst[(e / kGroup) * kPad + e % kGroup] = src[e];
  }
}

// Y[n x rows] = X[n x cols] W^T (+ bias): kBatchRows rows a warp, kRowsPerBlock warps a block. For kTile
// tokens at a time the block stages their vectors 32 groups at a time in shared memory (read from global
// memory once per block, used by every row of it); lane i dequantizes group i of the chunk of each of its
// rows into registers and sums it against each token exactly as warp_dot_row sums its group, and after the
// last chunk the warp adds the lanes' sums by the same butterfly: every result has matvec_kernel's bits.
// Two rows a warp: each x value a lane reads from shared memory serves both rows' products (one row a
// warp read 4 bytes of shared memory per weight and token, which bound the kernel at several times the
// weights' read time for 8 tokens). A row is dequantized once per tile of tokens; nothing of it is kept in
// shared memory beyond the warp's RowChunks (gpu_rows.cuh: the rows' next chunks of 32 groups, copied with
// 16-byte loads where the rows are 16-byte aligned, as in the matrix-vector kernel), so a block needs the
// same 33.8 KB (plus 3 chunks a row) whatever the row's width, and an SM runs several (a 28672-wide row of
// Llama-3-70B's FFN once took a 151 KB block: one warp per SM).
template <GgmlType T>
__global__ void matmul_kernel(const uint8_t* w, uint64_t row_bytes, uint32_t rows, uint32_t cols, const float* x,
                              uint32_t n, const float* bias, const uint32_t* sel, uint64_t mat_bytes, float* y) {
  constexpr uint32_t R = kBatchRows;
  __shared__ float xs[kStageFloats];  // [kTile][kChunk groups][kPad]
  extern __shared__ uint4 chunk_units[];  // batched_stage_bytes(T): kWeightStages x R chunks a warp, 16-byte aligned for cp.async
  uint8_t* const chunk_buf = reinterpret_cast<uint8_t*>(chunk_units);
  const uint32_t warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t first = (blockIdx.x * warps + warp) * R, groups = cols / kGroup;
  const bool active = first < rows;  // an idle warp still takes part in the block's staging and barriers
  if (sel) w += uint64_t(*sel) * mat_bytes;
  const uint8_t* rp[R];
  float b[R];
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) {  // a last row past the matrix repeats the last row, and is not written
    rp[r] = w + uint64_t(min(first + r, rows - 1)) * row_bytes;
    b[r] = active && first + r < rows && bias ? bias[first + r] : 0.0f;
  }
  const bool stage = active && gpu::weight_rows_stageable<T>(w, row_bytes);  // the same for a whole warp
  const gpu::RowChunks<T, R> ch(rp, groups, lane, chunk_buf + warp * gpu::kWeightStages * R * gpu::weight_stage_span(T));
  for (uint32_t t0 = blockIdx.y * kTile; t0 < n; t0 += gridDim.y * kTile) {  // blocks along y share the tiles
    const uint32_t m = min(kTile, n - t0);
    float part[kTile][R];
#pragma unroll
    for (uint32_t j = 0; j < kTile; ++j)
#pragma unroll
      for (uint32_t r = 0; r < R; ++r) part[j][r] = 0.0f;
    if (stage) ch.start();
    for (uint32_t g0 = 0; g0 < groups; g0 += kChunk) {
      const uint32_t cg = min(kChunk, groups - g0);
      __syncthreads();  // the previous chunk is read
      stage_chunk(x, cols, t0, m, g0, cg, xs);
      __syncthreads();
      if (!active) continue;
      if (stage) ch.arrive(g0 / kChunk);  // every lane of the warp: it waits for and copies with all of them
      float g[R][kGroup];
#pragma unroll
      for (uint32_t r = 0; r < R; ++r) {
        if (lane < cg && stage)
          dequant_group<T>(ch.at(g0 / kChunk, r), lane, g[r]);  // the same bytes, so the same values
        else if (lane < cg)
          dequant_group<T>(rp[r], g0 + lane, g[r]);
      }
      if (stage) ch.release();  // g is in registers: the chunk's buffer may be refilled
      if (lane >= cg) continue;
#pragma unroll
      for (uint32_t j = 0; j < kTile; ++j) {
        if (j >= m) break;
        const float* xg = xs + (j * kChunk + lane) * kPad;
        float s[R];
#pragma unroll
        for (uint32_t r = 0; r < R; ++r) s[r] = 0.0f;
#pragma unroll
        for (int l = 0; l < kGroup; ++l) {  // each row's products in the order l = 0, 1, ..., 31
          const float xv = xg[l];
#pragma unroll
          for (uint32_t r = 0; r < R; ++r) s[r] += g[r][l] * xv;
        }
#pragma unroll
        for (uint32_t r = 0; r < R; ++r) part[j][r] += s[r];
      }
    }
#pragma unroll
    for (uint32_t j = 0; j < kTile; ++j)
#pragma unroll
      for (uint32_t r = 0; r < R; ++r) {
        const float d = warp_sum(part[j][r]);  // every lane takes part in every shuffle
        if (active && lane == 0 && j < m && first + r < rows) y[uint64_t(t0 + j) * rows + first + r] = d + b[r];
      }
  }
}

uint32_t blocks_for(uint64_t n, uint32_t per_block) { return uint32_t((n + per_block - 1) / per_block); }

// matmul_kernel's dynamic shared memory: its warps' RowChunks (kBatchRows rows each), for the types it stages.
constexpr uint32_t batched_stage_bytes(GgmlType t) {
  return gpu::weight_chunk_bytes(t) == 0 ? 0 : kRowsPerBlock * kBatchRows * gpu::kWeightStages * gpu::weight_stage_span(t);
}

// count products (blockIdx.y) of m (or of the matrices m.sel picks) with x + j * x_stride into y + j * y_stride;
// by the staged kernel unless `allow_staged` is false or x does not fit in shared memory.
void matvec(cudaStream_t s, const GpuMatrix& m, uint32_t count, const float* x, uint64_t x_stride, const float* bias,
            float* y, uint64_t y_stride, bool allow_staged = true) {
  gpu::check_vector_alignment(x, "GPU matrix-vector kernel");
  if (count > 1) gpu::check_vector_alignment(x + x_stride, "GPU matrix-vector kernel (the second vector)");
  if (allow_staged && q8_takes(m.type, m.cols)) {
    const bool two = gpu::staged_launch(m.rows, m.cols, count, m.type).two_rows;
    if (count == 1 && !m.sel)
      return gpu::launch_rows_q8(s, m.type, gpu::MatrixRows{m.w, m.row_bytes, m.rows, bias, y}, m.cols, x, nullptr, 0.0f, two);
    return gpu::launch_matvec_q8_selected(s, m.type, m.w, m.row_bytes, m.rows, m.cols, count, x, x_stride, bias, m.sel, m.mat_bytes, y,
                                          y_stride, two);
  }
  const gpu::StagedLaunch g = allow_staged ? gpu::staged_launch(m.rows, m.cols, count, m.type) : gpu::StagedLaunch{};
  with_weight_type(m.type, [&](auto type) {
    constexpr GgmlType T = decltype(type)::value;
    auto staged = [&]<uint32_t R>() {
      constexpr auto K = matvec_staged_kernel<T, R>;
      gpu::allow_staged_shared<K>();
      const uint32_t blocks = gpu::resident_cap<K>(g.blocks, count, g.shared_bytes);
      K<<<dim3(blocks, count), gpu::kStagedWarps * 32, g.shared_bytes, s>>>(m.w, m.row_bytes, m.rows, m.cols, x, bias, m.sel,
                                                                           m.mat_bytes, y, x_stride, y_stride);
    };
    if (!g.staged)
      matvec_kernel<T><<<dim3(blocks_for(m.rows, kRowsPerBlock), count), kRowsPerBlock * 32, 0, s>>>(
          m.w, m.row_bytes, m.rows, m.cols, x, bias, m.sel, m.mat_bytes, y, x_stride, y_stride);
    else if (g.two_rows)
      staged.template operator()<2>();
    else
      staged.template operator()<1>();
  });
}

// One matrix's rows whose results are added to y: y[i] = y[i] + (dot + bias[i]), the sum add_kernel
// forms from MatrixRows's value, so the same bits as the product and then the residual add.
struct AddRows : gpu::MatrixRows {
  static constexpr bool kPairs = false;
  template <uint32_t R>
  __device__ void store(uint32_t first, const float (&dot)[R]) const {
#pragma unroll
    for (uint32_t r = 0; r < R; ++r)
      if (first + r < count) y[first + r] = y[first + r] + (dot[r] + (bias ? bias[first + r] : 0.0f));
  }
};

// The rows of `rows` (a row set of `type`, `cols` wide) times x (or x's RMS norm times norm_w) in one
// launch of the staged kernel: two rows a warp where staged_launch says so or the set is of pairs. False,
// enqueuing nothing, where x does not fit in a block's shared memory beside the kernel's static bytes.
template <class Rows>
bool launch_rows(cudaStream_t s, GgmlType type, const Rows& rows, uint32_t cols, const float* x, const float* norm_w = nullptr,
                 float eps = 0.0f) {
  gpu::StagedLaunch g = gpu::staged_launch(rows.count, cols, 1, type);
  if (q8_takes(type, cols)) {
    gpu::launch_rows_q8(s, type, rows, cols, x, norm_w, eps, g.two_rows);
    return true;
  }
  if (!g.staged) return false;
  if (Rows::kPairs && !g.two_rows) g.blocks = std::min(g.blocks, blocks_for(rows.count, 2 * gpu::kStagedWarps));
  bool launched = false;
  with_weight_type(type, [&](auto t) {
    constexpr GgmlType T = decltype(t)::value;
    auto launch = [&]<uint32_t R>() {
      constexpr auto K = matvec_rows_kernel<T, R, Rows>;
      // Its static shared memory (the norm's partial sums) leaves a little less than staged_launch assumed.
      if (g.shared_bytes > gpu::allow_staged_shared<K>()) return;
      const uint32_t blocks = gpu::resident_cap<K>(g.blocks, 1, g.shared_bytes);
      K<<<blocks, gpu::kStagedWarps * 32, g.shared_bytes, s>>>(rows, cols / kGroup, x, norm_w, eps);
      launched = true;
    };
    if constexpr (Rows::kPairs) {
      launch.template operator()<2>();
    } else {
      if (g.two_rows) launch.template operator()<2>();
      else launch.template operator()<1>();
    }
  });
  return launched;
}

ConcatRows concat_rows(std::span<const GpuProduct> ps) {
  ConcatRows c{};
  uint32_t rows = 0;
  for (uint32_t p = 0; p < kMaxFused; ++p) {
    const GpuProduct& q = ps[p < ps.size() ? p : 0];
    if (p < ps.size()) rows += q.m.rows;
    c.w[p] = q.m.w;
    c.row_bytes[p] = q.m.row_bytes;
    c.end[p] = rows;
    c.bias[p] = q.bias;
    c.y[p] = q.y;
  }
  c.count = rows;
  return c;
}

}  // namespace

namespace gpu {

namespace {
struct DeviceLimits {
  uint32_t sms = 1, shared_per_block = 48 * 1024, shared_per_sm = 48 * 1024;
};
// Asked once: the engine runs its kernels on one device.
const DeviceLimits& device_limits() {
  static const DeviceLimits l = [] {
    DeviceLimits d;
    int dev = 0, v = 0;
    device::check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && v > 0) d.sms = uint32_t(v);
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess && v > 0)
      d.shared_per_block = uint32_t(v);
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) == cudaSuccess && v > 0)
      d.shared_per_sm = uint32_t(v);
    return d;
  }();
  return l;
}
}  // namespace

uint32_t staged_shared_limit() { return device_limits().shared_per_block; }
uint32_t device_sms() { return device_limits().sms; }

// Blocks: enough for every row, but no more than can be resident at once (by shared memory; a block
// beyond that would only stage x again). Two rows per warp when there are more rows than warps resident
// at once (kStagedMinBlocks blocks an SM): then some warps take two rows either way, one after the other at one row a warp, side by side (sharing
// x's loads and each other's load latency) at two. Llama-3-8B's 4096-row O and down projections on 132
// SMs: 3,168 warps, 928 of them taking a second row after the first, where 2,048 pairs need no second round.
// Shared memory: x, then the warps' weight chunks (gpu_rows.cuh's weight_stage_bytes).
StagedLaunch staged_launch(uint32_t rows, uint32_t cols, uint32_t count, GgmlType type) {
  StagedLaunch l;
  const uint64_t bytes =
      uint64_t(cols / kGroup) * kGroup * sizeof(float) + (cols >= kGroup ? weight_stage_bytes(type) : 0);
  const DeviceLimits& d = device_limits();
  if (bytes == 0 || bytes > d.shared_per_block || rows == 0 || count == 0) return l;
  l.staged = true;
  l.shared_bytes = uint32_t(bytes);
  const uint64_t per_sm = std::clamp<uint64_t>(d.shared_per_sm / (bytes + 1024), 1, 2048 / (kStagedWarps * 32));
  const uint64_t resident = d.sms * per_sm;
  l.two_rows = uint64_t(rows) * count > uint64_t(d.sms) * kStagedMinBlocks * kStagedWarps;
  const uint64_t per_block = (l.two_rows ? 2 : 1) * kStagedWarps;
  const uint64_t needed = (rows + per_block - 1) / per_block;
  l.blocks = uint32_t(std::max<uint64_t>(1, std::min(needed, (resident + count - 1) / count)));
  return l;
}

}  // namespace gpu

void gpu_matmul_batched(gpu_stream_t stream, const GpuMatrix& m, const float* x, uint32_t n, const float* bias, float* y) {
  if (q8_takes(m.type, m.cols)) {  // the one-token products' arithmetic, token by token (gpu_rows_q8_batch.cuh)
    gpu::check_vector_alignment(x, "GPU 8-bit matrix kernel");
    return gpu::launch_matmul_q8(reinterpret_cast<cudaStream_t>(stream), m.type, m.w, m.row_bytes, m.rows, m.cols, x, n, bias, m.sel,
                                 m.mat_bytes, y);
  }
  with_weight_type(m.type, [&](auto type) {
    constexpr GgmlType T = decltype(type)::value;
    constexpr uint32_t kShared = batched_stage_bytes(T);
    if constexpr (kShared != 0) {  // above the 48 KB a launch may take without it, with the static x tile
      gpu::opt_in_shared<matmul_kernel<T>>(kShared, "cudaFuncSetAttribute (the batched matrix kernel's shared memory)");
    }
    // Rows alone fill few blocks for a narrow matrix (a MoE router's 128 rows: 8 blocks on 132 SMs, each
    // looping over every token of a prompt): the token tiles are spread over blocks along y too, up to
    // about two blocks an SM. A (row, token) result is its tile's, whichever block runs it: the same bits.
    const uint32_t bx = blocks_for(m.rows, kRowsPerBlock * kBatchRows), tiles = blocks_for(n, kTile);
    const uint32_t by = std::max(1u, std::min({blocks_for(2 * gpu::device_sms(), bx), tiles, 65535u}));
    matmul_kernel<T><<<dim3(bx, by), kRowsPerBlock * 32, kShared, reinterpret_cast<cudaStream_t>(stream)>>>(
        m.w, m.row_bytes, m.rows, m.cols, x, n, bias, m.sel, m.mat_bytes, y);
  });
}

void gpu_matvec_selected(gpu_stream_t stream, const GpuMatrix& m, uint32_t count, const float* x, uint64_t x_stride,
                         float* y, uint64_t y_stride) {
  matvec(reinterpret_cast<cudaStream_t>(stream), m, count, x, x_stride, nullptr, y, y_stride);
}

namespace {
void check_products(std::span<const GpuProduct> ps, const float* x) {
  gpu::check_vector_alignment(x, "GPU matrix-vector kernel");
  uint64_t total = 0;
  for (const GpuProduct& p : ps) {
    if (p.m.sel) throw std::invalid_argument("gpu_matvecs: a stack of matrices (sel) cannot share a launch; use gpu_matvec_selected");
    total += p.m.rows;
  }
  if (total >= (1ull << 31)) throw std::invalid_argument("gpu_matvecs: more than 2^31 rows in one call");
}
}  // namespace

namespace {
// Whether p is in GPU memory. Every block of a normalizing launch reads the norm's weights whole: from a
// streamed slot in host memory (read in place over the link) that would be every block's copy over PCIe,
// so such a layer keeps the norm kernel, which reads them once.
bool in_device_memory(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // not a pointer CUDA knows: not device memory; clear the error
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}
}  // namespace

bool gpu_matvecs_normed(gpu_stream_t stream, std::span<const GpuProduct> ps, const float* x, const float* norm_w, float eps) {
  check_products(ps, x);
  if (ps.empty() || ps.size() > kMaxFused || !norm_w || !in_device_memory(norm_w)) return false;
  for (const GpuProduct& p : ps)
    if (p.m.type != ps[0].m.type || p.m.cols != ps[0].m.cols) return false;
  return launch_rows(reinterpret_cast<cudaStream_t>(stream), ps[0].m.type, concat_rows(ps), ps[0].m.cols, x, norm_w, eps);
}

void gpu_matvecs(gpu_stream_t stream, std::span<const GpuProduct> ps, const float* x) {
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  check_products(ps, x);
  for (size_t i = 0; i < ps.size();) {
    size_t j = i + 1;  // products i .. j - 1 share a launch
    while (j < ps.size() && j - i < kMaxFused && ps[j].m.type == ps[i].m.type && ps[j].m.cols == ps[i].m.cols) ++j;
    if (j - i > 1 && launch_rows(s, ps[i].m.type, concat_rows(ps.subspan(i, j - i)), ps[i].m.cols, x)) {
      i = j;
      continue;
    }
    for (; i < j; ++i) matvec(s, ps[i].m, 1, x, 0, ps[i].bias, ps[i].y, 0);
  }
}

bool gpu_matvec_add(gpu_stream_t stream, const GpuMatrix& m, const float* x, const float* bias, float* y) {
  if (m.sel) return false;
  gpu::check_vector_alignment(x, "GPU matrix-vector kernel");
  return launch_rows(reinterpret_cast<cudaStream_t>(stream), m.type, AddRows{{m.w, m.row_bytes, m.rows, bias, y}}, m.cols, x);
}

bool gpu_matvec_norm_add(gpu_stream_t stream, const GpuMatrix& m, const float* x, const float* bias, float* tmp, const float* norm_w,
                         float eps, float* y, uint32_t* done) {
  if (m.sel || !norm_w || !done || q8_takes(m.type, m.cols)) return false;  // the 8-bit product, then the norm_add kernel
  gpu::check_vector_alignment(x, "GPU matrix-vector kernel");
  const gpu::StagedLaunch g = gpu::staged_launch(m.rows, m.cols, 1, m.type);
  if (!g.staged) return false;
  const gpu::MatrixRows rows{m.w, m.row_bytes, m.rows, bias, tmp};
  bool launched = false;
  with_weight_type(m.type, [&](auto t) {
    constexpr GgmlType T = decltype(t)::value;
    auto launch = [&]<uint32_t R>() {
      constexpr auto K = matvec_norm_add_kernel<T, R>;
      if (g.shared_bytes > gpu::allow_staged_shared<K>()) return;  // its static shared memory leaves a little less
      const uint32_t blocks = gpu::resident_cap<K>(g.blocks, 1, g.shared_bytes);
      K<<<blocks, gpu::kStagedWarps * 32, g.shared_bytes, reinterpret_cast<cudaStream_t>(stream)>>>(rows, m.cols / kGroup, x, norm_w,
                                                                                                   eps, y, done);
      launched = true;
    };
    if (g.two_rows) launch.template operator()<2>();
    else launch.template operator()<1>();
  });
  return launched;
}

void gpu_glu(gpu_stream_t stream, float* gate, const float* up, uint32_t n, FfnAct act) {
  if (n == 0) return;
  glu_kernel<<<blocks_for(n, 128), 128, 0, reinterpret_cast<cudaStream_t>(stream)>>>(gate, up, n, act);
}

bool gpu_matvec_glu(gpu_stream_t stream, const GpuMatrix& gate, const GpuMatrix& up, const float* x, FfnAct act, float* y,
                    const float* norm_w, float eps) {
  if (gate.type != up.type || gate.rows != up.rows || gate.cols != up.cols || gate.row_bytes != up.row_bytes || gate.sel || up.sel ||
      gate.rows >= (1u << 31) || (norm_w && !in_device_memory(norm_w)))
    return false;
  gpu::check_vector_alignment(x, "GPU matrix-vector kernel");
  return launch_rows(reinterpret_cast<cudaStream_t>(stream), gate.type,
                     GluRows{gate.w, up.w, gate.row_bytes, 2 * gate.rows, act, y}, gate.cols, x, norm_w, eps);
}

void gpu_matvec_unstaged(gpu_stream_t stream, const GpuMatrix& m, const float* x, const float* bias, float* y) {
  matvec(reinterpret_cast<cudaStream_t>(stream), m, 1, x, 0, bias, y, 0, false);
}

bool gpu_matvec_q8() { return q8_types_on() != 0; }

void gpu_set_matvec_q8(bool on) { q8_mask.store(on ? int(kAllQ8Types) : 0, std::memory_order_relaxed); }

uint32_t gpu_matvec_q8_types() { return uint32_t(q8_types_on()); }

void gpu_set_matvec_q8_types(uint32_t types) { q8_mask.store(int(types & kAllQ8Types), std::memory_order_relaxed); }

bool gpu_matvec_q8_takes(GgmlType t, uint32_t cols) { return q8_takes(t, cols); }

void gpu_matmul(gpu_stream_t stream, const GpuMatrix& m, const float* x, uint32_t n, const float* bias, float* y) {
  if (n == 1) return matvec(reinterpret_cast<cudaStream_t>(stream), m, 1, x, 0, bias, y, 0);
  gpu_matmul_batched(stream, m, x, n, bias, y);
}

}  // namespace gpunvme::llm
