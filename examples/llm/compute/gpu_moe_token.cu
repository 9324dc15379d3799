#include "examples/llm/compute/gpu_moe_token.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>

#include "device/cuda_check.h"
#include "examples/llm/compute/gpu_route_lanes.cuh"
#include "examples/llm/compute/gpu_rows.cuh"
#include "examples/llm/compute/gpu_rows_q8_batch.cuh"
#include "examples/llm/compute/ops.h"
#include "examples/llm/compute/route.h"

namespace gpunvme::llm {
namespace {

using gpu::kStagedMinBlocks;
using gpu::kStagedWarps;

// 1. The router's rows of the norm (block_rows with norm_w: every block normalizes x as it stages it),
// then the launch's last block to finish routes: each block's logits are made visible device-wide
// (__threadfence) before it counts itself done, so the last one reads all of them (gpu_matvec_norm_add's
// way); it then resets the counter. Block 0 writes the normed x for the experts' launch: its staged
// copy holds rms_norm_kernel's values (norm_staged).
template <GgmlType T, uint32_t R>
__global__ void __launch_bounds__(kStagedWarps * 32, kStagedMinBlocks)
    route_norm_kernel(gpu::MatrixRows router, uint32_t groups, const float* x, const float* norm_w, float eps, float* xn,
                      uint32_t n_expert, uint32_t k, Gating gating, uint32_t* routes, uint32_t* done) {
  extern __shared__ float4 xs[];
  __shared__ float p[kMaxRoutedExperts], lg[kMaxRoutedExperts], wt[kMaxRoutedExperts];
  __shared__ uint32_t id[kMaxRoutedExperts];
  gpu::block_rows<T, R>(router, groups, x, xs, norm_w, eps);
  if (blockIdx.x == 0) {
    const float* xf = reinterpret_cast<const float*>(xs);
    for (uint32_t e = threadIdx.x; e < groups * kGroup; e += blockDim.x)
      xn[e] = xf[4 * gpu::staged_index(e / kGroup, (e % kGroup) / 4) + e % 4];
  }
  if (!gpu::last_to_finish(done)) return;
  if (threadIdx.x < 32) gpu::route_warp(router.y, n_expert, k, gating, p, lg, id, wt, routes, reinterpret_cast<float*>(routes + k));
  if (threadIdx.x == 0) *done = 0;
}

// 2. The selected experts' gate and up rows interleaved (row 2h: gate row h, row 2h + 1: up row h, h =
// slot j's row r at j * rows + r), two a warp, lane 0 storing glu(act, gate, up) at h: the selected
// product's value (dot + 0.0f), its bias added as expert_bias_kernel adds it, then glu_kernel's GLU.
struct SelectedGluRows {
  static constexpr bool kPairs = true;
  const uint8_t *gate, *up;
  uint64_t row_bytes, mat_bytes;
  const uint32_t* sel;  // the routing's k ids
  uint32_t rows;        // each expert's (n_ff)
  uint32_t count;       // 2 k rows
  const float *gate_bias, *up_bias;
  FfnAct act;
  float* y;
  __device__ const uint8_t* row(uint32_t i) const {
    const uint32_t h = i >> 1, j = h / rows, r = h - j * rows;
    return ((i & 1) ? up : gate) + uint64_t(sel[j]) * mat_bytes + uint64_t(r) * row_bytes;
  }
  template <GgmlType T>
  __device__ bool stageable() const {
    return gpu::weight_rows_stageable<T>(gate, row_bytes) && gpu::weight_rows_stageable<T>(up, row_bytes) && mat_bytes % 16 == 0;
  }
  template <uint32_t R>
  __device__ void store(uint32_t first, const float (&dot)[R]) const {
    static_assert(R == 2, "a warp holds a gate row and its up row");
    const uint32_t h = first / 2, j = h / rows, r = h - j * rows;
    float g = dot[0] + 0.0f, u = dot[1] + 0.0f;
    if (gate_bias) g += gate_bias[uint64_t(sel[j]) * rows + r];
    if (up_bias) u += up_bias[uint64_t(sel[j]) * rows + r];
    y[h] = glu(act, g, u);
  }
};

template <GgmlType T, uint32_t R>
__global__ void __launch_bounds__(kStagedWarps * 32, kStagedMinBlocks)
    selected_glu_kernel(SelectedGluRows rows, uint32_t groups, const float* x) {
  extern __shared__ float4 xs[];
  gpu::block_rows<T, R>(rows, groups, x, xs);
}

// 3. A warp per output row i: the k experts' rows i against their own GLU outputs (all k staged in
// shared memory, each in staged_index's layout), kDownBatch experts' loads in flight at once, each row's
// sum warp_dot_row's (lane l: groups l, l + 32, ... in order, each group's 32 products in order,
// then the butterfly: the bits of every staged row loop), then `+ 0.0f` and the bias as the selected
// product and expert_bias_kernel give them, the weighted sum in routing order as weighted_sum_kernel adds
// it and the sum into x as add_kernel does. No counters: the k results of a row are one warp's.
constexpr uint32_t kDownBatch = 4;
template <GgmlType T>
__global__ void __launch_bounds__(kStagedWarps * 32)
    down_rows_kernel(const uint8_t* w, uint64_t row_bytes, uint64_t mat_bytes, const uint32_t* routes, uint32_t k, uint32_t rows,
                     uint32_t groups, const float* hidden, const float* bias, float* x) {
  extern __shared__ float4 xs[];  // [k][groups * 8]
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, span = groups * 8;
  const float4* h4 = reinterpret_cast<const float4*>(hidden);
  for (uint32_t f = threadIdx.x; f < k * span; f += blockDim.x) {
    const uint32_t j = f / span, r = f - j * span;
    gpu::cp_async_16(&xs[j * span + gpu::staged_index(r / 8, r % 8)], &h4[f]);
  }
  gpu::cp_async_commit();
  gpu::cp_async_wait<0>();
  __syncthreads();
  const float* weights = reinterpret_cast<const float*>(routes + k);
  for (uint32_t i = blockIdx.x * kStagedWarps + warp; i < rows; i += gridDim.x * kStagedWarps) {
    float a = 0.0f;
    for (uint32_t j0 = 0; j0 < k; j0 += kDownBatch) {
      float part[kDownBatch];
#pragma unroll
      for (uint32_t b = 0; b < kDownBatch; ++b) {
        part[b] = 0.0f;
        if (j0 + b >= k) continue;
        const uint8_t* row = w + uint64_t(routes[j0 + b]) * mat_bytes + uint64_t(i) * row_bytes;
        for (uint32_t grp = lane; grp < groups; grp += 32) {
          float g[kGroup];
          dequant_group<T>(row, grp, g);
          float4 xv[kGroup / 4];
          gpu::staged_group(xs + (j0 + b) * span, grp, xv);
          part[b] += gpu::group_dot(g, xv);
        }
      }
#pragma unroll
      for (uint32_t b = 0; b < kDownBatch; ++b) {
        const uint32_t j = j0 + b;
        if (j >= k) break;  // the same for every lane: the butterfly below is the whole warp's
        float v = gpu::warp_sum(part[b]) + 0.0f;
        if (bias) v += bias[uint64_t(routes[j]) * rows + i];
        a = a + weights[j] * v;
      }
    }
    if (lane == 0) x[i] += a;
  }
}

// 3, with 8-bit x (the down matrices' type taken by gpu_matmul.h's 8-bit path): the k GLU outputs
// quantised to 8-bit blocks in shared memory in one pass (stage_q8_vectors, each as the selected product
// quantises it), a warp per output row taking its k experts' rows kDownBatch at a time, their loads in
// flight together (warp_dot_rows_q8_x: each the selected product's row bits), the same epilogue as
// down_rows_kernel's in routing order. Staged one vector and one expert row at a time, this launch took
// 17.3 us of a Qwen3-30B-A3B layer on an H200 (ncu), about 2 k latencies in a row. Two blocks an SM
// (126 registers for Q4_K, no spills): at 193 registers one block an SM held 1,056 warps for 2,048 rows.
template <GgmlType T>
__global__ void __launch_bounds__(kStagedWarps * 32, 2)
    down_rows_q8_kernel(const uint8_t* w, uint64_t row_bytes, uint64_t mat_bytes, const uint32_t* routes, uint32_t k, uint32_t rows,
                        uint32_t groups, const float* hidden, const float* bias, float* x) {
  extern __shared__ uint4 q8_hidden[];  // [k][q8_token_stride(groups)]
  uint8_t* const sm = reinterpret_cast<uint8_t*>(q8_hidden);
  const uint64_t stride = gpu::q8_token_stride(groups);
  gpu::stage_q8_vectors<T>(hidden, uint64_t(groups) * kQ8Block, k, groups, sm, stride, nullptr, 0.0f);
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* weights = reinterpret_cast<const float*>(routes + k);
  for (uint32_t i = blockIdx.x * kStagedWarps + warp; i < rows; i += gridDim.x * kStagedWarps) {
    float a = 0.0f;
    for (uint32_t j0 = 0; j0 < k; j0 += kDownBatch) {
      const uint8_t* row[kDownBatch];
      const uint8_t* xs[kDownBatch];
#pragma unroll
      for (uint32_t b = 0; b < kDownBatch; ++b) {  // past k: expert j0's row again, its sum unused
        const uint32_t j = j0 + b < k ? j0 + b : j0;
        row[b] = w + uint64_t(routes[j]) * mat_bytes + uint64_t(i) * row_bytes;
        xs[b] = sm + j * stride;
      }
      float dot[kDownBatch];
      gpu::warp_dot_rows_q8_x<T, kDownBatch>(row, groups, xs, lane, dot);
#pragma unroll
      for (uint32_t b = 0; b < kDownBatch; ++b) {
        const uint32_t j = j0 + b;
        if (j >= k) break;
        float v = dot[b] + 0.0f;
        if (bias) v += bias[uint64_t(routes[j]) * rows + i];
        a = a + weights[j] * v;
      }
    }
    if (lane == 0) x[i] += a;
  }
}

// The launch of a staged kernel K<T, R> over `rows` rows `cols` wide (count of them along y): false where x
// does not fit beside K's static shared memory.
// Pairs: the rows come two a warp whatever their count.
template <bool kPairs, class Launch>
bool staged(GgmlType type, uint32_t rows, uint32_t cols, uint32_t count, Launch launch) {
  gpu::StagedLaunch g = gpu::staged_launch(rows, cols, count, type);
  if (!g.staged) return false;
  if (kPairs && !g.two_rows) g.blocks = std::min(g.blocks, (rows + 2 * kStagedWarps - 1) / (2 * kStagedWarps));
  bool launched = false;
  gpu::with_weight_type(type, [&](auto t) {
    constexpr GgmlType T = decltype(t)::value;
    if constexpr (kPairs) {
      launched = launch.template operator()<T, 2>(g);
    } else {
      if (g.two_rows) launched = launch.template operator()<T, 2>(g);
      else launched = launch.template operator()<T, 1>(g);
    }
  });
  return launched;
}

// Launches down_rows_kernel: one warp a row of x, the blocks the device holds at once (each stages the k
// vectors once).
bool down_rows(cudaStream_t s, const ExpertStacks& w, uint32_t k, uint32_t shared, float* x, const MoeTokenScratch& m) {
  if (gpu_matvec_q8_takes(w.down.type, w.down.cols)) {
    const uint32_t groups = w.down.cols / kQ8Block, bytes = uint32_t(k * gpu::q8_token_stride(groups));
    bool launched = false;
    gpu::with_q8_type(w.down.type, [&]<GgmlType T>() {
      constexpr auto K = down_rows_q8_kernel<T>;
      if (bytes > gpu::allow_staged_shared<K>()) return;
      const uint32_t blocks = gpu::resident_cap<K>((w.down.rows + kStagedWarps - 1) / kStagedWarps, 1, bytes);
      K<<<blocks, kStagedWarps * 32, bytes, s>>>(w.down.w, w.down.row_bytes, w.down.mat_bytes, m.routes, k, w.down.rows, groups,
                                                 m.hidden, w.down_bias, x);
      launched = true;
    });
    return launched;
  }
  bool launched = false;
  gpu::with_weight_type(w.down.type, [&](auto t) {
    constexpr GgmlType T = decltype(t)::value;
    constexpr auto K = down_rows_kernel<T>;
    gpu::opt_in_shared<K>(gpu::staged_shared_limit(), "cudaFuncSetAttribute (the fused MoE's down kernel)");
    const uint32_t blocks = gpu::resident_cap<K>((w.down.rows + kStagedWarps - 1) / kStagedWarps, 1, shared);
    K<<<blocks, kStagedWarps * 32, shared, s>>>(w.down.w, w.down.row_bytes, w.down.mat_bytes, m.routes, k, w.down.rows,
                                                w.down.cols / kGroup, m.hidden, w.down_bias, x);
    launched = true;
  });
  return launched;
}

}  // namespace

bool gpu_moe_token(gpu_stream_t stream, const ExpertStacks& w, const float* norm_w, float eps, uint32_t k, Gating gating,
                   FfnAct act, float* x, const MoeTokenScratch& m) {
  const uint32_t E = w.router.cols, F = w.gate.rows, n_expert = w.router.rows;
  if (n_expert > kMaxRoutedExperts || k == 0 || k > n_expert || !norm_w || w.gate.type != w.up.type || w.gate.rows != w.up.rows ||
      w.gate.cols != E || w.up.cols != E || w.gate.row_bytes != w.up.row_bytes || w.gate.mat_bytes != w.up.mat_bytes ||
      w.down.rows != E || w.down.cols != F || E % kGroup != 0 || F % kGroup != 0 || uint64_t(2) * k * F >= (1u << 31))
    return false;
  // The router's launch multiplies in FP32 (its normed x is written for the experts): a router whose type
  // takes 8-bit x (gpu_matmul.h) leaves the layer to the unfused operations. The experts' launches take
  // 8-bit x where their types do, with the selected products' bits.
  if (gpu_matvec_q8_takes(w.router.type, E)) return false;
  const bool glu_q8 = gpu_matvec_q8_takes(w.gate.type, E), down_q8 = gpu_matvec_q8_takes(w.down.type, F);
  if (down_q8 && k * gpu::q8_token_stride(F / kQ8Block) + 256 > gpu::staged_shared_limit()) return false;  // down_rows_q8_kernel's k vectors
  // Every launch must fit before the first is enqueued: a refusal enqueues nothing.
  const gpu::StagedLaunch a = gpu::staged_launch(n_expert, E, 1, w.router.type), b = gpu::staged_launch(2 * k * F, E, 1, w.gate.type);
  constexpr uint32_t kStatic = 4 * kMaxRoutedExperts * 4 + 64 + 16;  // route_norm_kernel's p, lg, id, wt, the norm's partials, last
  const uint32_t down_shared = k * F * uint32_t(sizeof(float));  // down_rows_kernel's k GLU outputs
  if (!a.staged || !b.staged || a.shared_bytes + kStatic > gpu::staged_shared_limit() || down_shared > gpu::staged_shared_limit())
    return false;
  gpu::check_vector_alignment(x, "fused MoE");
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  const uint32_t* ids = m.routes;

  const bool routed = staged<false>(w.router.type, n_expert, E, 1, [&]<GgmlType T, uint32_t R>(const gpu::StagedLaunch& g) {
    constexpr auto K = route_norm_kernel<T, R>;
    if (g.shared_bytes > gpu::allow_staged_shared<K>()) return false;
    const uint32_t blocks = gpu::resident_cap<K>(g.blocks, 1, g.shared_bytes);
    K<<<blocks, kStagedWarps * 32, g.shared_bytes, s>>>(gpu::MatrixRows{w.router.w, w.router.row_bytes, n_expert, w.router_bias, m.logits},
                                                        E / kGroup, x, norm_w, eps, m.xn, n_expert, k, gating, m.routes, m.router_done);
    return true;
  });
  if (!routed) return false;
  const SelectedGluRows glu_rows{w.gate.w, w.up.w, w.gate.row_bytes, w.gate.mat_bytes, ids, F, 2 * k * F, w.gate_bias, w.up_bias, act, m.hidden};
  if (glu_q8) gpu::launch_rows_q8(s, w.gate.type, glu_rows, E, m.xn, nullptr, 0.0f, b.two_rows);
  const bool glu_done = glu_q8 || staged<true>(w.gate.type, 2 * k * F, E, 1, [&]<GgmlType T, uint32_t R>(const gpu::StagedLaunch& g) {
    constexpr auto K = selected_glu_kernel<T, R>;
    if (g.shared_bytes > gpu::allow_staged_shared<K>()) return false;
    const uint32_t blocks = gpu::resident_cap<K>(g.blocks, 1, g.shared_bytes);
    K<<<blocks, kStagedWarps * 32, g.shared_bytes, s>>>(glu_rows, E / kGroup, m.xn);
    return true;
  });
  const bool summed = glu_done && down_rows(s, w, k, down_shared, x, m);
  // The kernels' static shared memory is a few hundred bytes; x's staging fits the opt-in limit with
  // room for it (checked above for the router's), so a refusal after the first launch does not happen
  // in practice: say so loudly rather than leave a half-done FFN.
  if (!summed) throw std::logic_error("gpu_moe_token: the experts' launches were refused after the routing's");
  device::check_cuda(cudaGetLastError(), "fused MoE kernels");
  return true;
}

}  // namespace gpunvme::llm
