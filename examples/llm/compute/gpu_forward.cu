#include "examples/llm/compute/gpu_forward.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>

#include "device/cuda_check.h"
#include "examples/llm/compute/gpu_argmax.h"
#include "examples/llm/compute/gpu_attention_decode.cuh"
#include "examples/llm/compute/gpu_flash_attention.cuh"
#include "examples/llm/compute/gpu_gemm.h"
#include "examples/llm/compute/gpu_matmul.h"
#include "examples/llm/compute/gpu_moe_grouped.h"
#include "examples/llm/compute/gpu_moe_token.h"
#include "examples/llm/compute/gpu_norm.cuh"
#include "examples/llm/compute/gpu_route.h"
#include "examples/llm/compute/gpu_expert_stage.h"
#include "examples/llm/compute/gpu_rows.cuh"
#include "examples/llm/compute/gpu_rows_q8_batch.cuh"
#include "examples/llm/compute/gpu_warp.cuh"
#include "examples/llm/compute/ops.h"
#include "runtime/model/tensor_names.h"

namespace gpunvme::llm {
namespace {

constexpr uint32_t kRowsPerBlock = 8;  // matvec_fetched_kernel unstaged: one warp per row, 8 warps per block
constexpr uint32_t kThreads = 256;
constexpr uint32_t kMaxLogitRows = 32;  // rows of logits a pass returns at most (a speculative pass: k + 1)

using gpu::warp_dot_row;
using gpu::warp_max;
using gpu::warp_sum;

// The same product for a fetched expert: its part `proj` (model::Projection) lies in the scratchpad at the
// offset the fetcher recorded for the k-th routing id; rows [row_begin, row_begin + rows) of its
// `total_rows` (a slice the fetcher said is in: gpu_fetch_types.h), into y[0, rows); read where `st`
// copied it (gpu_expert_stage.h) or, without, in the scratchpad. R rows per warp with x staged in
// shared memory (gpu_rows.cuh); R = 0: a warp per row reading x from global memory (rows too wide to
// stage x for). kQ8: x staged as 8-bit blocks, the one-token 8-bit products (gpu_rows_q8_batch.cuh).
//
// Launch bounds: the staged kernels' three blocks an SM (kStagedMinBlocks: 80 registers a thread as ptxas
// allocates them), except the variants that spilled under that cap, which get two (128 registers).
// ptxas -v, sm_90, CUDA 13.0 (session 28): spilled at 80 registers the 8-bit Q4_K two-row variant (16
// bytes stored, 28 loaded a thread), and of the FP32 ones F32 (one row 8/12, two rows 32/36), F16
// two-row (16/24) and Q4_K two-row (4/4); relaxed, they take 96, 89, 103, 86 and 91 registers, no spills.
// Every other variant 47-80 registers, no spills (the 8-bit ones 68-71). resident_cap asks CUDA how many
// blocks fit, so a relaxed variant launches no more than its registers allow. Not yet timed on a GPU.
constexpr uint32_t fetched_min_blocks(GgmlType t, uint32_t r, bool q8) {
  const bool spilled = q8 ? (t == GgmlType::Q4_K && r == 2)
                          : (t == GgmlType::F32 && r > 0) || (r == 2 && (t == GgmlType::F16 || t == GgmlType::Q4_K));
  return spilled ? 2 : gpu::kStagedMinBlocks;
}

template <GgmlType T, uint32_t R, bool kQ8 = false>
__global__ void __launch_bounds__(gpu::kStagedWarps * 32, fetched_min_blocks(T, R, kQ8)) matvec_fetched_kernel(const uint8_t* scratch, const stream::GpuFetchedExpert* ex,
                                      const uint32_t* selection, uint32_t k, uint32_t proj, uint64_t row_bytes,
                                      uint32_t rows, uint32_t cols, const float* x, float* y, uint32_t row_begin,
                                      uint32_t total_rows, stream::StagedExperts st) {
  extern __shared__ float4 xs[];
  const uint32_t d = selection[k];
  const stream::GpuFetchedExpert& e = ex[d];
  const uint64_t off = stream::find_part(e, proj, uint64_t(total_rows) * row_bytes);
  // No such part (or not the size the slices were cut for), or its read failed: poison the output,
  // read no garbage.
  if (off == stream::kNoPart || e.failed != 0) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += gridDim.x * blockDim.x) y[i] = NAN;
    return;  // the whole block returns: every thread reads the same expert
  }
  const uint8_t* w = (st.base ? st.base + stream::staged_offset(st, d, e, off) : scratch + off) + uint64_t(row_begin) * row_bytes;
  if constexpr (kQ8) {
    uint8_t* const sm = reinterpret_cast<uint8_t*>(xs);
    gpu::stage_q8<T>(x, cols / kQ8Block, sm, nullptr, 0.0f);
    gpu::q8_matrix_rows<T, R>(gpu::MatrixRows{w, row_bytes, rows, nullptr, y}, cols / kQ8Block, sm);
  } else if constexpr (R > 0) {
    gpu::block_rows<T, R>(w, row_bytes, rows, cols / kGroup, x, xs, nullptr, y);
  } else {
    const uint32_t row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;  // kRowsPerBlock warps
    if (row >= rows) return;
    const float dot = warp_dot_row<T>(w + uint64_t(row) * row_bytes, cols, x, lane);
    if (lane == 0) y[row] = dot;
  }
}

using gpu::kNormAhead;

// out = x * rsqrt(mean(x^2) + eps) * w, over `n` elements, for `count` consecutive vectors (one block of
// kThreads each).
__global__ void rms_norm_kernel(const float* x, const float* w, uint32_t n, float eps, float* out) {
  static_assert(kThreads == gpu::kNormThreads);
  __shared__ double partial[kThreads / 32];
  x += uint64_t(blockIdx.x) * n;
  out += uint64_t(blockIdx.x) * n;
  const float scale = gpu::rms_scale(x, n, eps, partial);
  const uint32_t step = blockDim.x, span = kNormAhead * step;
  // Each thread writes only the elements it read itself, so reading ahead of its own stores is safe
  // when out is x.
  uint32_t i = threadIdx.x;
  for (; i + span - step < n; i += span) {
    float v[kNormAhead], g[kNormAhead];
#pragma unroll
    for (uint32_t j = 0; j < kNormAhead; ++j) v[j] = x[i + j * step], g[j] = w[i + j * step];
#pragma unroll
    for (uint32_t j = 0; j < kNormAhead; ++j) out[i + j * step] = v[j] * scale * g[j];
  }
  for (; i < n; i += step) out[i] = x[i] * scale * w[i];
}

// The attention's inputs of a pass (Backend::head_norm_rope of Q and of K, then store_kv), one warp per
// (head, token = blockIdx.y): blocks x < q_heads take Q's head x, the others K's head j = x - q_heads.
// A head is optionally RMS-normed (per head), then RoPE'd over its first n_rot dimensions at the token's
// position (positions[token], in device memory). With a cache (kc non-null), K's warp then writes its
// rotated head and V's head j as halves into the token's slot at its position (the layer's cache is
// [slot][n_ctx][kv_dim]). One launch for Q, K and the store (rope_store_kv, issue 36), or one per
// operation (q_heads 0, or kv_heads 0, or no cache): the same code, one call of the head's arithmetic,
// so every head has the same bits whichever way it is launched. The order is the operations': a head's
// norm, then its RoPE, and the store reads K after its own head's RoPE (__syncwarp: the warp's writes
// are visible to its lanes) and V as the matrix wrote it; nothing else reads or writes these heads.
// norm_rope_head (gpu_attention_decode.cuh): that arithmetic, shared with the attention's own token.
using gpu::HeadRope;
using gpu::norm_rope_head;
using gpu::OwnToken;

__global__ void rope_store_kernel(float* q, float* k, const float* v, uint32_t q_heads, uint32_t kv_heads, const float* q_norm,
                                  const float* k_norm, HeadRope r, const uint32_t* positions, const uint32_t* slots, uint32_t n_ctx,
                                  __half* kc, __half* vc) {
  const uint32_t t = blockIdx.y, lane = threadIdx.x, pos = positions[t], head_dim = r.head_dim;
  const bool is_q = blockIdx.x < q_heads;
  const uint32_t j = is_q ? blockIdx.x : blockIdx.x - q_heads, heads = is_q ? q_heads : kv_heads;
  float* h = (is_q ? q : k) + (uint64_t(t) * heads + j) * head_dim;
  norm_rope_head(h, is_q ? q_norm : k_norm, pos, r, lane);
  if (is_q || !kc) return;
  __syncwarp();
  const uint64_t kv_dim = uint64_t(kv_heads) * head_dim, at = (uint64_t(slots[t]) * n_ctx + pos) * kv_dim + uint64_t(j) * head_dim;
  const float* vh = v + uint64_t(t) * kv_dim + uint64_t(j) * head_dim;
  for (uint32_t i = lane; i < head_dim; i += 32) {
    kc[at + i] = __float2half_rn(h[i]);
    vc[at + i] = __float2half_rn(vh[i]);
  }
}

// Token t's K and V rows (kv_dim halves each) into its slot's cache at its position: the layer's cache
// is [slot][n_ctx][kv_dim].
__global__ void store_kv_kernel(const float* k, const float* v, uint32_t n, uint32_t kv_dim, const uint32_t* positions,
                                const uint32_t* slots, uint32_t n_ctx, __half* kc, __half* vc) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * kv_dim) return;
  const uint32_t t = i / kv_dim;
  const uint64_t at = (uint64_t(slots[t]) * n_ctx + positions[t]) * kv_dim + i % kv_dim;
  kc[at] = __float2half_rn(k[i]);
  vc[at] = __float2half_rn(v[i]);
}

// One block per (query head, token t0 + blockIdx.y): the token at its position pos in its slot (of
// slot_stride halves in the layer's cache) sees that slot's positions [first, pos] (the last `window` of
// them on a sliding-window layer, window 0: all); scores, softmax, weighted sum of V.
// Causal inside a batch: later tokens' cache rows are written but never read here. The warps take the
// positions in turn, for the scores (the lanes split the head's dimensions and the warp adds them) and
// for the weighted sum of V (each warp over its own positions, lanes over dimensions, then the warps'
// sums added in warp order): a decode token at a context of a few dozen positions had one thread per
// position doing a whole dot product, and one thread per dimension walking every position (16-25 µs a
// layer on an H200, as much as a matrix-vector product). A token's result depends only on its position,
// never on the pass it is in or on the other sequences there, so passes of 1..32 tokens keep one
// another's bits. Dynamic shared memory: attention_shared_bytes(head_dim, own). Scores: blockIdx.y's row.
//
// With `own` (Backend::rope_store_attend, a pass of one token: one launch fewer a layer, issue 36), the
// token's Q and K heads come as the matrices wrote them: before anything else warp 0 norms and rotates
// the block's Q head in place (the block owns it) and warp 1 a copy of its KV head's K in shared memory,
// each by norm_rope_head as rope_store_kernel does (the same operations, so the same values); the
// group's first block writes that K head and V's as halves into the cache at the token's place (K's
// activation keeps the product's values: every block of the group reads it). For its own position a
// block reads K and V from its shared halves (the values the cache row holds: the same rounding), every
// other position from the cache, which the pass does not write; the scores, the softmax and the sums
// are then the kernel's without `own`, in the same order.
constexpr uint32_t kAttnWarps = kThreads / 32;
inline uint32_t attention_shared_bytes(uint32_t head_dim, bool own = false) {
  return (1 + kAttnWarps + (own ? 1 : 0)) * head_dim * sizeof(float) + (own ? 2 * head_dim * sizeof(__half) : 0);
}
template <bool kOwn>
__global__ void attention_kernel(float* q, __half* kc, __half* vc, uint32_t kv_dim, uint32_t head_dim,
                                 uint32_t group, uint32_t window, const uint32_t* positions, const uint32_t* slots,
                                 uint64_t slot_stride, uint32_t t0, float scale, const float* sinks, float* scores,
                                 uint32_t n_ctx, float* out, OwnToken own) {
  extern __shared__ float attn_shared[];
  float* qs = attn_shared;                // the query head
  float* part = attn_shared + head_dim;  // [warp][head_dim]: each warp's share of the weighted sum
  __shared__ float red[kAttnWarps];
  const uint32_t token = t0 + blockIdx.y, h = blockIdx.x, kvh = h / group, pos = positions[token];
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t first = window && pos + 1 > window ? pos + 1 - window : 0;
  const uint64_t head = uint64_t(token) * gridDim.x + h;
  float* sc = scores + (uint64_t(blockIdx.y) * gridDim.x + h) * n_ctx;
  kc += slots[token] * slot_stride;
  vc += slots[token] * slot_stride;
  [[maybe_unused]] const __half *own_k = nullptr, *own_v = nullptr;  // kOwn: position pos's K and V halves
  if constexpr (kOwn) {
    float* kf = part + kAttnWarps * head_dim;
    __half* kh = reinterpret_cast<__half*>(kf + head_dim);
    __half* vh = kh + head_dim;
    const uint64_t kv_at = uint64_t(token) * kv_dim + kvh * head_dim;
    if (warp == 0) {
      norm_rope_head(q + head * head_dim, own.q_norm, pos, own.r, lane);
    } else if (warp == 1) {
      for (uint32_t i = lane; i < head_dim; i += 32) kf[i] = own.k[kv_at + i];
      __syncwarp();
      norm_rope_head(kf, own.k_norm, pos, own.r, lane);
      __syncwarp();
      const bool writer = h % group == 0;
      const uint64_t at = uint64_t(pos) * kv_dim + kvh * head_dim;
      for (uint32_t i = lane; i < head_dim; i += 32) {
        kh[i] = __float2half_rn(kf[i]);
        vh[i] = __float2half_rn(own.v[kv_at + i]);
        if (writer) kc[at + i] = kh[i], vc[at + i] = vh[i];
      }
    }
    __syncthreads();
    own_k = kh, own_v = vh;
  }
  for (uint32_t i = threadIdx.x; i < head_dim; i += blockDim.x) qs[i] = q[head * head_dim + i];
  __syncthreads();
  float mx = -INFINITY;
  for (uint32_t p = first + warp; p <= pos; p += kAttnWarps) {
    const __half* kp = kOwn && p == pos ? own_k : kc + uint64_t(p) * kv_dim + kvh * head_dim;
    float s = 0.0f;
    for (uint32_t i = lane; i < head_dim; i += 32) s += qs[i] * __half2float(kp[i]);
    s = warp_sum(s) * scale;  // every lane holds the sum
    if (lane == 0) sc[p] = s;
    mx = fmaxf(mx, s);
  }
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  mx = red[0];
  for (uint32_t i = 1; i < kAttnWarps; ++i) mx = fmaxf(mx, red[i]);
  const float sink = sinks ? sinks[h] : -INFINITY;  // ops.h: the sink joins max and sum, takes no value
  mx = with_sink_max(mx, sink);
  __syncthreads();
  float sum = 0.0f;
  for (uint32_t p = first + threadIdx.x; p <= pos; p += blockDim.x) sum += (sc[p] = expf(sc[p] - mx));
  sum = warp_sum(sum);
  if (lane == 0) red[warp] = sum;
  __syncthreads();
  sum = 0.0f;
  for (uint32_t i = 0; i < kAttnWarps; ++i) sum += red[i];
  sum = with_sink_sum(sum, sink, mx);
  for (uint32_t i = lane; i < head_dim; i += 32) {
    float acc = 0.0f;
    for (uint32_t p = first + warp; p <= pos; p += kAttnWarps) {
      const __half* vp = kOwn && p == pos ? own_v : vc + uint64_t(p) * kv_dim + kvh * head_dim;
      acc += sc[p] / sum * __half2float(vp[i]);
    }
    part[warp * head_dim + i] = acc;
  }
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < head_dim; i += blockDim.x) {
    float acc = 0.0f;
    for (uint32_t w = 0; w < kAttnWarps; ++w) acc += part[w * head_dim + i];
    out[head * head_dim + i] = acc;
  }
}

// y[k][i] += bias[ids[k]][i] for the k selected experts' rows of n (an expert's bias row: llama.cpp's
// ggml_add_id); the ids stay on the device, as the routing kernel wrote them.
__global__ void expert_bias_kernel(float* y, const float* bias, const uint32_t* ids, uint32_t k, uint32_t n) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < k * n) y[i] += bias[uint64_t(ids[i / n]) * n + i % n];
}

__global__ void add_kernel(float* x, const float* y, uint32_t n) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

// x += RMS norm of y times w, `n` elements, one block of kThreads per token (Backend::norm_add: a
// post-norm and the residual add, issue 36), with the bits of rms_norm_kernel and then add_kernel
// (gpu_norm.cuh's norm_add_block says why).
__global__ void norm_add_kernel(float* x, const float* y, const float* w, uint32_t n, float eps) {
  static_assert(kThreads == gpu::kNormThreads);
  gpu::norm_add_block(x + uint64_t(blockIdx.x) * n, y + uint64_t(blockIdx.x) * n, w, n, eps);
}

// acc = sum over j < k, in order, of weight[j] * y[j * n ..]: the routed experts' outputs, weighted.
__global__ void weighted_sum_kernel(float* acc, const float* y, const float* weight, uint32_t n, uint32_t k) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = 0.0f;
  for (uint32_t j = 0; j < k; ++j) a = a + weight[j] * y[uint64_t(j) * n + i];
  acc[i] = a;
}

// Pre-gating for a pass of n tokens: the union of their predicted top k (routes: [n][2k], k ids then k
// weights as floats), best first: by how many tokens chose the expert, then by their summed weight,
// then by id; out[0..m). Fewer than m distinct: the rest repeat the best (the fetcher's placement
// collapses repeats). One block; shared: 2 * n_expert floats. The sums' order may vary with the
// atomics: only the order of reads ahead can, never a routing.
__global__ void pass_union_kernel(const uint32_t* routes, uint32_t n, uint32_t k, uint32_t n_expert, uint32_t m, uint32_t* out) {
  extern __shared__ float union_shared[];
  float *count = union_shared, *score = union_shared + n_expert;
  __shared__ uint32_t distinct;
  if (threadIdx.x == 0) distinct = 0;
  for (uint32_t e = threadIdx.x; e < n_expert; e += blockDim.x) count[e] = 0.0f, score[e] = 0.0f;
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < n * k; i += blockDim.x) {
    const uint32_t* r = routes + uint64_t(i / k) * 2 * k;
    const uint32_t e = r[i % k];
    if (e >= n_expert) continue;
    atomicAdd(&count[e], 1.0f);
    atomicAdd(&score[e], __uint_as_float(r[k + i % k]));
  }
  __syncthreads();
  for (uint32_t e = threadIdx.x; e < n_expert; e += blockDim.x) {
    if (count[e] == 0.0f) continue;
    atomicAdd(&distinct, 1u);
    uint32_t rank = 0;
    for (uint32_t f = 0; f < n_expert && rank < m; ++f)
      rank += count[f] > count[e] || (count[f] == count[e] && (score[f] > score[e] || (score[f] == score[e] && f < e)));
    if (rank < m) out[rank] = e;
  }
  __syncthreads();
  for (uint32_t i = distinct + threadIdx.x; i < m; i += blockDim.x) out[i] = out[0];
}

// x[token] = scale * embedding row ids[token], for token = blockIdx.y.
__global__ void embed_kernel(GgmlType t, const uint8_t* table, uint64_t row_bytes, const uint32_t* ids, float scale, float* x,
                             uint32_t n) {
  const uint32_t g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= n / kGroup) return;
  x += uint64_t(blockIdx.y) * n;
  float buf[kGroup];
  dequant_group(t, table + uint64_t(ids[blockIdx.y]) * row_bytes, g, buf);
  for (int l = 0; l < kGroup; ++l) x[g * kGroup + l] = buf[l] * scale;
}

// out[r] = x[rows[r]] for r = blockIdx.y: the rows of n-wide vectors a pass wants logits of.
__global__ void gather_rows_kernel(const float* x, const uint32_t* rows, uint32_t n, float* out) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[uint64_t(blockIdx.y) * n + i] = x[uint64_t(rows[blockIdx.y]) * n + i];
}

// Whether the small passes' attention takes decode_attention (heads it fits), else attention_kernel.
bool decode_split_used(const ModelConfig& c) { return gpu::decode_attention_fits(c.head_dim); }

uint32_t blocks_for(uint64_t n, uint32_t per_block) { return uint32_t((n + per_block - 1) / per_block); }

// Rows [row_begin, row_begin + rows) of routing id k's projection `proj` times x into y + row_begin.
void launch_fetched_rows(cudaStream_t s, const TensorRef& w, ExpertSource* src, uint32_t k, model::Projection proj,
                         const float* x, float* y, uint32_t row_begin, uint32_t rows, const stream::StagedExperts& st) {
  const gpu::StagedLaunch g = gpu::staged_launch(rows, uint32_t(w.cols), 1, w.type);
  if (gpu_matvec_q8_takes(w.type, uint32_t(w.cols))) {  // the resident experts' 8-bit bits (gpu_matvec_selected's)
    const uint32_t bytes = uint32_t(gpu::q8_shared_bytes(uint32_t(w.cols) / kQ8Block));
    gpu::with_q8_type(w.type, [&]<GgmlType T>() {
      auto run = [&]<uint32_t R>() {
        constexpr auto K = matvec_fetched_kernel<T, R, true>;
        gpu::require_q8_static<K>();
        const uint32_t blocks = gpu::resident_cap<K>((rows + R * gpu::kQ8Warps - 1) / (R * gpu::kQ8Warps), 1, bytes);
        K<<<blocks, gpu::kQ8Warps * 32, bytes, s>>>(src->scratch(), src->experts(), src->selection(), k, uint32_t(proj), w.row_bytes(),
                                                    rows, uint32_t(w.cols), x, y + row_begin, row_begin, uint32_t(w.rows), st);
      };
      if (g.two_rows) run.template operator()<2>();
      else run.template operator()<1>();
    });
    return;
  }
  gpu::with_weight_type(w.type, [&](auto type) {
    constexpr GgmlType T = decltype(type)::value;
    auto run = [&]<uint32_t R>(uint32_t blocks, uint32_t shared) {
      if constexpr (R > 0) gpu::allow_staged_shared<matvec_fetched_kernel<T, R>>();
      matvec_fetched_kernel<T, R><<<blocks, (R > 0 ? gpu::kStagedWarps : kRowsPerBlock) * 32, shared, s>>>(
          src->scratch(), src->experts(), src->selection(), k, uint32_t(proj), w.row_bytes(), rows, uint32_t(w.cols), x,
          y + row_begin, row_begin, uint32_t(w.rows), st);
    };
    if (!g.staged) run.template operator()<0>(blocks_for(rows, kRowsPerBlock), 0);
    else if (g.two_rows) run.template operator()<2>(g.blocks, g.shared_bytes);
    else run.template operator()<1>(g.blocks, g.shared_bytes);
  });
}

// Routing id k's projection `proj` (fetched by `src`) times x into y, slice by slice: each launch after
// the wait for its slice (the rows it reads end within slices 0..i, waited for in turn), so a large
// part's first rows are multiplied while its last bytes still stream. With `st`, each slice's rows are
// first copied into VRAM (gpu_expert_stage.h) and multiplied there.
void launch_fetched(cudaStream_t s, const TensorRef& w, ExpertSource* src, uint32_t k, model::Projection proj,
                    const float* x, float* y, const ExpertStaging& stage, const stream::StagedExperts& st) {
  gpu::check_vector_alignment(x, "GPU fetched-expert kernel");
  const uint64_t rb = w.row_bytes(), slice = stream::part_slice_bytes(rb * w.rows);
  const uint32_t slices = src->part_slices(proj);  // the fetcher's; the kernel checks the part's size
  uint32_t row = 0;
  for (uint32_t i = 0; i < slices; ++i) {
    src->wait_slice(k, proj, i, reinterpret_cast<gpu_stream_t>(s));
    const uint32_t end = i + 1 == slices ? uint32_t(w.rows) : uint32_t(std::min<uint64_t>(w.rows, (i + 1) * slice / rb));
    if (end > row) {
      stage.copy(reinterpret_cast<gpu_stream_t>(s), *src, st, k, proj, rb * w.rows, row * rb, end * rb);
      launch_fetched_rows(s, w, src, k, proj, x, y, row, end - row, st);
    }
    row = std::max(row, end);
  }
}

template <class T>
T* alloc(uint64_t count, uint64_t& total) {
  void* p = nullptr;
  device::check_cuda(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc");
  total += count * sizeof(T);
  return static_cast<T*>(p);
}

// The widest row of the matrices a layer multiplies through Backend::matmul (block.cpp): the tensor-core
// product's scratch for the tokens' vectors is sized for it.
uint32_t widest_layer_matrix(const ModelWeights& w) {
  uint64_t cols = kGroup;
  for (const LayerWeights& l : w.layers)
    for (const TensorRef* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down})
      if (t->present) cols = std::max(cols, t->cols);
  return uint32_t(cols);
}

}  // namespace

bool grouped_moe_used(const ModelConfig& c, uint32_t max_batch, bool fast_prompt, bool experts_fetched) {
  if (!c.is_moe()) return false;
  const uint32_t fetched_min = GroupedMoe::fetched_min_tokens();
  return (fast_prompt && max_batch > kSmallPassTokens) || (experts_fetched && fetched_min && max_batch >= fetched_min);
}

bool gpu_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? std::string(cudaGetErrorString(e)) : "no CUDA device";
    return false;
  }
  return true;
}

GpuForward::GpuForward(const ModelConfig& c, const ModelWeights& w, uint32_t n_ctx, GlobalWeights globals,
                       gpu_stream_t compute, uint32_t max_batch, bool fast_prompt, KvCacheShape kv, bool experts_fetched)
    : c_(c), w_(w), n_ctx_(n_ctx), globals_(globals), stream_(compute), max_batch_(std::max(1u, max_batch)),
      logit_rows_(std::min(max_batch_, std::max(kMaxLogitRows, kv.seqs))), fast_prompt_(fast_prompt), kv_(kv) {
  if (kv_.end == 0) kv_.end = c.n_layer;
  if (kv_.seqs == 0) throw std::invalid_argument("GpuForward: a KV cache needs at least one sequence slot");
  if (kv_.first >= kv_.end || kv_.end > c.n_layer)
    throw std::invalid_argument("GpuForward: KV layers " + std::to_string(kv_.first) + ".." + std::to_string(kv_.end) +
                                " of a model of " + std::to_string(c.n_layer));
  uint64_t& t = device_bytes_;
  const uint64_t B = max_batch_;
  x_ = alloc<float>(B * c.n_embd, t);
  xn_ = alloc<float>(B * c.n_embd, t);
  tmp_ = alloc<float>(B * c.n_embd, t);
  moe_acc_ = alloc<float>(B * c.n_embd, t);
  q_ = alloc<float>(B * c.q_dim(), t);
  att_ = alloc<float>(B * c.q_dim(), t);
  k_ = alloc<float>(B * c.kv_dim(), t);
  v_ = alloc<float>(B * c.kv_dim(), t);
  gate_ = alloc<float>(B * c.n_ff, t);
  up_ = alloc<float>(B * c.n_ff, t);
  // Scores for attention_kernel's passes: all of them where heads are too wide for the flash kernel, else
  // only the small passes' (longer ones take gpu_flash_attention.cuh's, which keeps none).
  // attend_small() launches that many tokens at a time.
  score_rows_ = flash() ? std::min(max_batch_, kSmallPassTokens) : max_batch_;
  // With heads decode_attention takes, its chunk states and counters instead (gpu_attention_decode.cuh).
  const bool split = decode_split_used(c);
  scores_ = alloc<float>(split ? gpu::decode_attention_floats(c.n_head, c.n_head_kv, c.head_dim) : uint64_t(score_rows_) * c.n_head * n_ctx, t);
  if (split) {
    const uint64_t at = gpu::decode_counters_at(c.n_head, c.n_head_kv, c.head_dim);
    device::check_cuda(cudaMemset(scores_ + at, 0, (gpu::decode_attention_floats(c.n_head, c.n_head_kv, c.head_dim) - at) * sizeof(float)),
                       "cudaMemset");
  }
  logits_d_ = alloc<float>(uint64_t(logit_rows_) * c.n_vocab, t);
  router_ = alloc<float>(c.n_expert > 0 ? c.n_expert : 1, t);
  experts_ = alloc<uint32_t>(2 * (c.n_expert_used > 0 ? c.n_expert_used : 1), t);
  if (c.is_moe()) {  // pre-gating: a row per token of a pass (pregate_pass)
    xn_pre_ = alloc<float>(B * c.n_embd, t);
    router_pre_ = alloc<float>(B * c.n_expert, t);
    pred_ = alloc<uint32_t>(2 * uint64_t(c.n_expert_used), t);
    routes_pre_ = alloc<uint32_t>(B * 2 * c.n_expert_used, t);
    device::check_cuda(cudaMallocHost(&pred_host_, c.n_expert_used * sizeof(uint32_t)), "cudaMallocHost");
    device::check_cuda(cudaEventCreateWithFlags(&pre_x_, cudaEventDisableTiming), "pre-gating event");
    device::check_cuda(cudaEventCreateWithFlags(&pre_read_, cudaEventDisableTiming), "pre-gating event");
    device::check_cuda(cudaEventCreateWithFlags(&pred_copied_, cudaEventDisableTiming), "pre-gating event");
    stage_ = std::make_unique<ExpertStaging>();
  }
  const uint64_t K = c.n_expert_used > 0 ? c.n_expert_used : 1;
  moe_gate_ = alloc<float>(K * c.n_ff, t);
  moe_up_ = alloc<float>(K * c.n_ff, t);
  moe_out_ = alloc<float>(K * c.n_embd, t);
  moe_done_ = alloc<uint32_t>(1, t);
  device::check_cuda(cudaMemset(moe_done_, 0, sizeof(uint32_t)), "cudaMemset");
  const char* fused_env = std::getenv("GPUNVME_MOE_FUSED");  // "0": the A/B switch, off
  moe_fused_ = !(fused_env && std::string(fused_env) == "0");
  pass_dev_ = alloc<uint32_t>(4 * B, t);
  norm_done_ = alloc<uint32_t>(1, t);
  device::check_cuda(cudaMemset(norm_done_, 0, sizeof(uint32_t)), "cudaMemset");
  alloc_kv_cache();
  device::check_cuda(cudaMallocHost(&logits_host_, uint64_t(logit_rows_) * c.n_vocab * sizeof(float)), "cudaMallocHost");
  for (uint32_t i = 0; i < 2; ++i) {
    device::check_cuda(cudaMallocHost(&pass_host_[i], 4 * B * sizeof(uint32_t)), "cudaMallocHost");
    device::check_cuda(cudaEventCreateWithFlags(&pass_copied_[i], cudaEventDisableTiming), "pass event");
  }
  device::check_cuda(cudaEventCreateWithFlags(&done_, cudaEventBlockingSync | cudaEventDisableTiming), "token event");
  if (fast_prompt_ && max_batch_ > kSmallPassTokens) {
    gemm_ = std::make_unique<TensorGemm>(max_batch_, widest_layer_matrix(w));
    t += gemm_->device_bytes();
  }
  if (grouped_moe_used(c, max_batch_, fast_prompt_, experts_fetched)) {  // the token path's bits, or with fast_prompt the tensor cores'
    grouped_ = std::make_unique<GroupedMoe>(c, max_batch_, fast_prompt_);
    t += grouped_->device_bytes();
  }
}

GpuForward::~GpuForward() {
  cudaStreamSynchronize(stream_);
  for (void* p : {(void*)k_cache_, (void*)v_cache_}) kv_.host ? cudaFreeHost(p) : cudaFree(p);
  for (void* p : {(void*)x_, (void*)xn_, (void*)tmp_, (void*)moe_acc_, (void*)q_, (void*)att_, (void*)k_, (void*)v_,
                  (void*)gate_, (void*)up_, (void*)scores_, (void*)logits_d_, (void*)router_, (void*)experts_,
                  (void*)pass_dev_, (void*)norm_done_, (void*)moe_gate_, (void*)moe_up_, (void*)moe_out_, (void*)moe_done_,
                  (void*)xn_pre_, (void*)router_pre_, (void*)pred_, (void*)routes_pre_})
    cudaFree(p);
  if (pred_host_) cudaFreeHost(pred_host_);
  if (pre_x_) cudaEventDestroy(pre_x_);
  if (pre_read_) cudaEventDestroy(pre_read_);
  if (pred_copied_) cudaEventDestroy(pred_copied_);
  cudaFreeHost(logits_host_);
  for (uint32_t i = 0; i < 2; ++i) {
    cudaFreeHost(pass_host_[i]);
    if (pass_copied_[i]) cudaEventDestroy(pass_copied_[i]);
  }
  cudaEventDestroy(done_);
}

// K and V, each [layer][slot][pos][kv_dim] halves: in GPU memory, or pinned host memory the kernels
// read through its mapping (UVA: the host pointer is the device's). Out of memory names the fixes.
void GpuForward::alloc_kv_cache() {
  kv_bytes_ = kv_cache_bytes(c_, kv_, n_ctx_);
  for (uint16_t** p : {&k_cache_, &v_cache_}) {
    void* q = nullptr;
    const cudaError_t e = kv_.host ? cudaHostAlloc(&q, kv_bytes_ / 2, cudaHostAllocMapped) : cudaMalloc(&q, kv_bytes_ / 2);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it
      throw std::runtime_error(kv_does_not_fit(kv_.seqs, n_ctx_, kv_bytes_, kv_.host, cudaGetErrorString(e)));
    }
    *p = static_cast<uint16_t*>(q);
  }
  if (!kv_.host) device_bytes_ += kv_bytes_;
}

void GpuForward::embed(uint32_t token, uint32_t pos) { embed(std::span(&token, 1), pos); }

void GpuForward::embed(std::span<const uint32_t> tokens, uint32_t pos0) { embed(one_sequence(tokens, pos0, false)); }

void GpuForward::embed(std::span<const PassToken> tokens) {
  for (const PassToken& t : tokens)
    if (t.id >= c_.n_vocab) throw std::runtime_error("token id " + std::to_string(t.id) + " is outside the vocabulary");
  set_pass(tokens);
  enqueue_embed();
}

void GpuForward::embed_picked(PassToken t) {
  if (!argmax_) throw std::logic_error("embed_picked: no greedy pick was made before");
  t.id = 0;  // a valid id for set_pass's checks; the pick replaces it on the device
  set_pass(std::span(&t, 1));
  device::check_cuda(cudaMemcpyAsync(pass_dev_, argmax_->device_id(), sizeof(uint32_t), cudaMemcpyDeviceToDevice, stream_), "picked id");
  enqueue_embed();
}

void GpuForward::enqueue_embed() {
  const TensorRef& e = w_.token_embd;
  embed_kernel<<<dim3(blocks_for(c_.n_embd / kGroup, 128), n_), 128, 0, stream_>>>(e.type, globals_.token_embd, e.row_bytes(),
                                                                                   ids(), c_.embd_scale, x_, c_.n_embd);
  device::check_cuda(cudaGetLastError(), "embed kernel");
}

namespace {
GpuMatrix matrix(const TensorRef& t, const uint8_t* w, const uint32_t* sel = nullptr) {
  return {t.type, w, t.row_bytes(), uint32_t(t.rows), uint32_t(t.cols), sel, t.mat_bytes()};
}
void enqueue_matmul(cudaStream_t s, const TensorRef& t, const uint8_t* w, const float* x, uint32_t n, const float* bias, float* y,
            const uint32_t* sel = nullptr) {
  gpu_matmul(reinterpret_cast<gpu_stream_t>(s), matrix(t, w, sel), x, n, bias, y);
}
// n consecutive vectors of `dim` (one block each); out may be x.
void rms_norm(cudaStream_t s, const float* x, const uint8_t* w, uint32_t dim, uint32_t n, float eps, float* out) {
  rms_norm_kernel<<<n, kThreads, 0, s>>>(x, reinterpret_cast<const float*>(w), dim, eps, out);
}
const float* f32(const WeightView& v, const TensorRef& t) {
  return t.present ? reinterpret_cast<const float*>(v.at(t)) : nullptr;
}
// The per-head norm and RoPE arguments of a layer's Q/K heads (norm_rope_head).
HeadRope head_rope(const ModelConfig& c, const RopeParams& rope) { return {c.head_dim, c.n_rot, c.rms_eps, rope, c.rope}; }

// The selected experts' bias rows (F32, resident in the layer's view: small beside the matrices) added to
// their k outputs; nothing where the model has none.
void add_expert_bias(cudaStream_t s, const WeightView& v, const TensorRef& b, const uint32_t* ids, uint32_t k, float* y) {
  if (!b.present) return;
  const uint32_t n = uint32_t(b.cols);
  expert_bias_kernel<<<blocks_for(uint64_t(k) * n, 128), 128, 0, s>>>(y, f32(v, b), ids, k, n);
}
}  // namespace

bool GpuForward::flash() const { return fast_prompt_ && c_.head_dim <= gpu::kFlashMaxHeadDim; }

float* GpuForward::buf(Act a) const {
  switch (a) {
    case Act::kX: return x_;
    case Act::kXn: return xn_;
    case Act::kQ: return q_;
    case Act::kK: return k_;
    case Act::kV: return v_;
    case Act::kAtt: return att_;
    case Act::kTmp: return tmp_;
    case Act::kGate: return gate_;
    case Act::kUp: return up_;
  }
  throw std::logic_error("no such activation");
}

void GpuForward::norm(Act in, const TensorRef& w, Act out) {
  rms_norm(stream_, buf(in), view_.at(w), c_.n_embd, n_, c_.rms_eps, buf(out));
  device::check_cuda(cudaGetLastError(), "norm kernel");
}

// Group by group (a pass of one sequence is one group): the small passes' kernels, or a long segment's
// fast ones over its own rows.
void GpuForward::matmul(const TensorRef& w, const TensorRef& bias, Act in, Act out) {
  const GpuMatrix m = matrix(w, view_.at(w));
  for (const Group& g : groups_)
    gpu_matmul_pass(stream_, g.fast ? gemm_.get() : nullptr, m, buf(in) + uint64_t(g.first) * m.cols, g.count, f32(view_, bias),
                    buf(out) + uint64_t(g.first) * m.rows);
}

// Q's or K's heads alone, by the fused kernel without the cache (the same code for each head).
void GpuForward::head_norm_rope(Act qk, const TensorRef& norm, const RopeParams& rope) {
  if (qk != Act::kQ && qk != Act::kK) throw std::logic_error("head_norm_rope: Q or K");
  const uint32_t heads = act_width(c_, qk) / c_.head_dim;
  const bool q = qk == Act::kQ;
  const float* nw = f32(view_, norm);
  rope_store_kernel<<<dim3(heads, n_), 32, 0, stream_>>>(q_, k_, v_, q ? heads : 0, q ? 0 : heads, q ? nw : nullptr, q ? nullptr : nw,
                                                         head_rope(c_, rope), positions(), slots(), n_ctx_, nullptr, nullptr);
  device::check_cuda(cudaGetLastError(), "Q/K norm and RoPE kernel");
}

void GpuForward::rope_store_kv(const TensorRef& q_norm, const TensorRef& k_norm, const RopeParams& rope, uint32_t layer) {
  const uint64_t at = kv_layer_offset(layer);
  rope_store_kernel<<<dim3(c_.n_head + c_.n_head_kv, n_), 32, 0, stream_>>>(
      q_, k_, v_, c_.n_head, c_.n_head_kv, f32(view_, q_norm), f32(view_, k_norm), head_rope(c_, rope), positions(), slots(), n_ctx_,
      reinterpret_cast<__half*>(k_cache_) + at, reinterpret_cast<__half*>(v_cache_) + at);
  device::check_cuda(cudaGetLastError(), "Q/K norm, RoPE and KV store kernel");
}

uint64_t GpuForward::kv_layer_offset(uint32_t layer) const {
  if (layer < kv_.first || layer >= kv_.end)
    throw std::logic_error("GpuForward: layer " + std::to_string(layer) + " is outside its KV cache's layers " +
                           std::to_string(kv_.first) + ".." + std::to_string(kv_.end));
  return uint64_t(layer - kv_.first) * kv_.seqs * n_ctx_ * c_.kv_dim();
}

// Each token's K and V rows go to its slot at its position.
void GpuForward::store_kv(uint32_t layer) {
  const uint32_t KV = c_.kv_dim();
  const uint64_t at = kv_layer_offset(layer);
  store_kv_kernel<<<blocks_for(uint64_t(n_) * KV, 128), 128, 0, stream_>>>(
      k_, v_, n_, KV, positions(), slots(), n_ctx_, reinterpret_cast<__half*>(k_cache_) + at, reinterpret_cast<__half*>(v_cache_) + at);
  device::check_cuda(cudaGetLastError(), "KV store kernel");
}

// A long segment on the flash kernel (no scores in memory) over its slot's cache; the rest on
// attention_kernel, whose token results do not depend on the pass.
void GpuForward::attend(const AttnParams& p) {
  const uint32_t KV = c_.kv_dim(), QD = c_.q_dim();
  const uint64_t layer_off = kv_layer_offset(p.layer);
  for (const Group& g : groups_) {
    if (!(g.fast && flash())) {
      attend_small(p, g.first, g.count);
      continue;
    }
    const uint64_t at = layer_off + uint64_t(g.seq) * n_ctx_ * KV;
    gpu::flash_attention(stream_, q_ + uint64_t(g.first) * QD, reinterpret_cast<const __half*>(k_cache_) + at,
                         reinterpret_cast<const __half*>(v_cache_) + at, KV, c_.head_dim, c_.n_head, c_.n_head / c_.n_head_kv,
                         p.window, g.pos0, g.count, c_.attn_scale, f32(view_, p.sinks), att_ + uint64_t(g.first) * QD);
    device::check_cuda(cudaGetLastError(), "flash attention kernel");
  }
}

// The small passes' attention split along the positions (gpu_attention_decode.cuh) for tokens from t0.
gpu::DecodeArgs GpuForward::decode_args(const AttnParams& p, uint32_t t0, const gpu::OwnToken& own) const {
  const uint64_t layer_off = kv_layer_offset(p.layer);
  gpu::DecodeArgs a{};
  a.q = q_, a.kc = reinterpret_cast<__half*>(k_cache_) + layer_off, a.vc = reinterpret_cast<__half*>(v_cache_) + layer_off;
  a.kv_dim = c_.kv_dim(), a.head_dim = c_.head_dim, a.n_head = c_.n_head, a.group = c_.n_head / c_.n_head_kv;
  a.window = p.window, a.positions = positions(), a.slots = slots(), a.slot_stride = uint64_t(n_ctx_) * c_.kv_dim();
  a.t0 = t0, a.scale = c_.attn_scale, a.sinks = f32(view_, p.sinks), a.part = scores_, a.out = att_, a.own = own;
  return a;
}

void GpuForward::attend_small(const AttnParams& p, uint32_t first, uint32_t count) {
  const uint64_t layer_off = kv_layer_offset(p.layer);
  if (decode_split_used(c_)) {
    for (uint32_t t0 = first; t0 < first + count; t0 += gpu::kDecodeTokens)
      gpu::decode_attention<false>(stream_, decode_args(p, t0, {}), c_.n_head_kv, std::min(gpu::kDecodeTokens, first + count - t0));
    device::check_cuda(cudaGetLastError(), "attention kernel");
    return;
  }
  for (uint32_t t0 = first; t0 < first + count; t0 += score_rows_) {
    const uint32_t n = std::min(score_rows_, first + count - t0);
    attention_kernel<false><<<dim3(c_.n_head, n), kThreads, attention_shared_bytes(c_.head_dim), stream_>>>(
        q_, reinterpret_cast<__half*>(k_cache_) + layer_off, reinterpret_cast<__half*>(v_cache_) + layer_off, c_.kv_dim(), c_.head_dim,
        c_.n_head / c_.n_head_kv, p.window, positions(), slots(), uint64_t(n_ctx_) * c_.kv_dim(), t0, c_.attn_scale,
        f32(view_, p.sinks), scores_, n_ctx_, att_, OwnToken{});
    device::check_cuda(cudaGetLastError(), "attention kernel");
  }
}

// One token: its Q/K norms, RoPE and KV store in its attention's launch (attention_kernel's `own`).
void GpuForward::rope_store_attend(const TensorRef& q_norm, const TensorRef& k_norm, const RopeParams& rope, const AttnParams& p) {
  if (n_ != 1) return Backend::rope_store_attend(q_norm, k_norm, rope, p);
  const uint64_t layer_off = kv_layer_offset(p.layer);
  const OwnToken own{k_, v_, f32(view_, q_norm), f32(view_, k_norm), head_rope(c_, rope)};
  if (decode_split_used(c_)) {
    gpu::decode_attention<true>(stream_, decode_args(p, 0, own), c_.n_head_kv, 1);
    device::check_cuda(cudaGetLastError(), "Q/K norm, RoPE, KV store and attention kernel");
    return;
  }
  attention_kernel<true><<<dim3(c_.n_head, 1), kThreads, attention_shared_bytes(c_.head_dim, true), stream_>>>(
      q_, reinterpret_cast<__half*>(k_cache_) + layer_off, reinterpret_cast<__half*>(v_cache_) + layer_off, c_.kv_dim(), c_.head_dim,
      c_.n_head / c_.n_head_kv, p.window, positions(), slots(), uint64_t(n_ctx_) * c_.kv_dim(), 0, c_.attn_scale, f32(view_, p.sinks),
      scores_, n_ctx_, att_, own);
  device::check_cuda(cudaGetLastError(), "Q/K norm, RoPE, KV store and attention kernel");
}

void GpuForward::glu(Act gate, Act up, FfnAct a) {
  const uint64_t n = uint64_t(n_) * c_.n_ff;
  gpu_glu(stream_, buf(gate), buf(up), uint32_t(n), a);
  device::check_cuda(cudaGetLastError(), "GLU kernel");
}

// Token by token: each token routes to its own experts (fetched for it when they stream). A prompt pass:
// expert by expert (gpu_moe_grouped.h), fetched experts too where their products take the tensor cores.
//
// Pre-gating for a pass of several tokens (pregate_pass) runs after the layer's last fetch of the pass:
// an earlier one would be settled, cut and evicted by this layer's own later fetches (the fetcher keeps
// a prediction's experts only until the next fetch's faults need their slots). Only where that last
// fetch is a grouped decode group's: a prompt segment's tensor-core fetches read nearly every expert
// (the drive does not idle there), and on the token path (a fetch per token) it was slower at 2
// sequences (11.8 against 12.7 tok/s, H200, session 23), so such passes predict only where the source
// asks (PregateTarget::token_path: GPUNVME_PREGATE_PASS=all).
void GpuForward::moe(const LayerWeights& l, Act in, Act out) {
  const bool tensor = grouped_ && grouped_->tensor_cores(l.gate_exps.type, l.up_exps.type);
  for (const Group& g : groups_) {  // a long segment's rows grouped; a short one's token by token (the header's rule)
    const uint64_t at = uint64_t(g.first) * c_.n_embd;
    const bool small_fetched = src_ && !g.fast && grouped_ && grouped_->groups_fetched(g.count);
    const bool last = &g == &groups_.back() && n_ > 1 && src_;  // the pass's last fetch of the layer is in g
    if (grouped_ && ((g.fast && (!src_ || tensor)) || small_fetched)) {
      const WeightView& v = view_;
      const auto stack = [&](const TensorRef& t) { return matrix(t, src_ ? nullptr : v.at(t)); };  // fetched: the shape
      const ExpertStacks st{matrix(l.gate_inp, v.at(l.gate_inp)), f32(v, l.gate_inp_b), stack(l.gate_exps), stack(l.up_exps),
                            stack(l.down_exps), f32(v, l.gate_exps_b), f32(v, l.up_exps_b), f32(v, l.down_exps_b)};
      const bool pre = last && small_fetched;
      if (src_) staged_ = {};  // its fetches' experts are read in the scratchpad
      const std::function<void()> after_fetches = [&] { if (pre) pregate_pass(l, *src_, false); };
      grouped_->run(reinterpret_cast<gpu_stream_t>(stream_), st, buf(in) + at, g.count, moe_acc_ + at, src_, l.index, g.fast,
                    small_fetched ? predicted_on_host(l.index) : std::span<const uint32_t>{}, after_fetches);
    } else {
      for (uint32_t t = g.first; t < g.first + g.count; ++t)
        moe_token(l, buf(in) + uint64_t(t) * c_.n_embd, t, last && t + 1 == n_ && !g.fast);
    }
  }
  if (moe_parts_ & kMoeCopy)
    device::check_cuda(cudaMemcpyAsync(buf(out), moe_acc_, uint64_t(n_) * c_.n_embd * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
                       "MoE copy");
  device::check_cuda(cudaGetLastError(), "MoE kernels");
}

// One token over experts in the layer's view (no fetches, no pre-gating): gpu_moe_token's three
// launches, which write the routing, the GLU's and the down products into the token path's buffers.
void GpuForward::norm_moe_add(const TensorRef& norm_w, const LayerWeights& l, Act x) {
  if (n_ == 1 && !src_ && moe_fused_ && x == Act::kX) {
    const WeightView& v = view_;
    const auto m = [&](const TensorRef& t) { return matrix(t, v.at(t)); };
    const ExpertStacks w{m(l.gate_inp), f32(v, l.gate_inp_b), m(l.gate_exps), m(l.up_exps), m(l.down_exps),
                         f32(v, l.gate_exps_b), f32(v, l.up_exps_b), f32(v, l.down_exps_b)};
    const MoeTokenScratch scratch{xn_, router_, experts_, moe_gate_, moe_done_};
    before_residual_write(x);
    if (gpu_moe_token(reinterpret_cast<gpu_stream_t>(stream_), w, f32(v, norm_w), c_.rms_eps, c_.n_expert_used, c_.gating, c_.act,
                      x_, scratch)) {
      ++fused_moe_layers_;
      return;
    }
  }
  Backend::norm_moe_add(norm_w, l, x);
}

void GpuForward::before_residual_write(Act x) {
  if (x == Act::kX && pre_pending_) {  // the prediction's norm has read x_ (or its ids were copied)
    device::check_cuda(cudaStreamWaitEvent(stream_, pre_read_, 0), "pre-gating wait");
    pre_pending_ = false;
  }
}

void GpuForward::add(Act x, Act y) {
  before_residual_write(x);
  const uint64_t n = uint64_t(n_) * act_width(c_, x);
  add_kernel<<<blocks_for(n, 128), 128, 0, stream_>>>(buf(x), buf(y), uint32_t(n));
  device::check_cuda(cudaGetLastError(), "add kernel");
}

// One token: the product, its post-norm and the add in one launch (gpu_matvec_norm_add).
void GpuForward::matmul_norm_add(const TensorRef& w, const TensorRef& bias, Act in, const TensorRef& norm_w, Act x) {
  if (n_ == 1 && act_width(c_, x) == c_.n_embd && uint32_t(w.rows) == c_.n_embd) {
    before_residual_write(x);
    if (gpu_matvec_norm_add(stream_, matrix(w, view_.at(w)), buf(in), f32(view_, bias), tmp_, f32(view_, norm_w), c_.rms_eps, buf(x),
                            norm_done_)) {
      device::check_cuda(cudaGetLastError(), "product, norm and residual add kernel");
      return;
    }
  }
  Backend::matmul_norm_add(w, bias, in, norm_w, x);
}

void GpuForward::norm_add(Act y, const TensorRef& w, Act x) {
  if (x == y || act_width(c_, x) != c_.n_embd) return Backend::norm_add(y, w, x);  // the kernel reads y whole, then writes x
  before_residual_write(x);
  norm_add_kernel<<<n_, kThreads, 0, stream_>>>(buf(x), buf(y), f32(view_, w), c_.n_embd, c_.rms_eps);
  device::check_cuda(cudaGetLastError(), "norm and add kernel");
}

// One token: the staged kernel over the products' rows together (gpu_matvecs). A pass of several keeps
// one product each (the batched kernel or the tensor cores, gpu_gemm.h).
void GpuForward::matmuls(std::span<const Product> ps, Act in) {
  if (n_ != 1 || ps.size() > 3) return Backend::matmuls(ps, in);
  GpuProduct g[3];
  for (size_t i = 0; i < ps.size(); ++i) g[i] = {matrix(ps[i].w, view_.at(ps[i].w)), f32(view_, ps[i].bias), buf(ps[i].out)};
  gpu_matvecs(stream_, std::span(g, ps.size()), buf(in));
  device::check_cuda(cudaGetLastError(), "fused matrix-vector kernel");
}

// One token whose products share a type and width: the norm computed by each block of their launch.
void GpuForward::norm_matmuls(const TensorRef& norm_w, Act in, std::span<const Product> ps) {
  if (n_ == 1 && ps.size() <= 3 && act_width(c_, in) == c_.n_embd) {
    GpuProduct g[3];
    for (size_t i = 0; i < ps.size(); ++i) g[i] = {matrix(ps[i].w, view_.at(ps[i].w)), f32(view_, ps[i].bias), buf(ps[i].out)};
    if (gpu_matvecs_normed(stream_, std::span(g, ps.size()), buf(in), f32(view_, norm_w), c_.rms_eps)) {
      device::check_cuda(cudaGetLastError(), "norm and fused matrix-vector kernel");
      return;
    }
  }
  Backend::norm_matmuls(norm_w, in, ps);
}

void GpuForward::gated_matmul(const TensorRef& gate, const TensorRef& up, Act in, FfnAct act) {
  if (n_ == 1 && gpu_matvec_glu(stream_, matrix(gate, view_.at(gate)), matrix(up, view_.at(up)), buf(in), act, buf(Act::kGate))) {
    device::check_cuda(cudaGetLastError(), "gate, up and GLU kernel");
    return;
  }
  Backend::gated_matmul(gate, up, in, act);
}

void GpuForward::norm_gated_matmul(const TensorRef& norm_w, Act in, const TensorRef& gate, const TensorRef& up, FfnAct act) {
  if (n_ == 1 && act_width(c_, in) == c_.n_embd &&
      gpu_matvec_glu(stream_, matrix(gate, view_.at(gate)), matrix(up, view_.at(up)), buf(in), act, buf(Act::kGate),
                     f32(view_, norm_w), c_.rms_eps)) {
    device::check_cuda(cudaGetLastError(), "norm, gate, up and GLU kernel");
    return;
  }
  Backend::norm_gated_matmul(norm_w, in, gate, up, act);
}

void GpuForward::matmul_add(const TensorRef& w, const TensorRef& bias, Act in, Act x) {
  before_residual_write(x);
  if (n_ == 1 && act_width(c_, x) == uint32_t(w.rows) &&
      gpu_matvec_add(stream_, matrix(w, view_.at(w)), buf(in), f32(view_, bias), buf(x))) {
    device::check_cuda(cudaGetLastError(), "product and residual add kernel");
    return;
  }
  Backend::matmul_add(w, bias, in, x);
}

void GpuForward::set_pass(std::span<const PassToken> tokens) {
  const uint32_t n = uint32_t(tokens.size());
  if (n == 0 || n > max_batch_)
    throw std::runtime_error("a pass of " + std::to_string(n) + " tokens: this GPU forward pass takes 1.." + std::to_string(max_batch_));
  for (size_t i = 0; i < n; ++i) {
    check_slot(tokens[i].seq, kv_.seqs, ("token " + std::to_string(i) + " of the pass: ").c_str());
    if (tokens[i].pos >= n_ctx_)
      throw std::runtime_error("position " + std::to_string(tokens[i].pos) + " is past the context (" + std::to_string(n_ctx_) + ")");
  }
  // This turn's pinned buffer is free once its last copy ran (two passes ago: a bounded wait, if any).
  uint32_t* h = pass_host_[pass_turn_];
  device::check_cuda(cudaEventSynchronize(pass_copied_[pass_turn_]), "pass copy");
  const uint32_t B = max_batch_;
  logit_rows_of_pass_.clear();
  for (uint32_t i = 0; i < n; ++i) {
    h[i] = tokens[i].id, h[B + i] = tokens[i].pos, h[2 * B + i] = tokens[i].seq;
    if (tokens[i].logits) h[3 * B + uint32_t(logit_rows_of_pass_.size())] = i, logit_rows_of_pass_.push_back(i);
  }
  device::check_cuda(cudaMemcpyAsync(pass_dev_, h, 4 * uint64_t(B) * sizeof(uint32_t), cudaMemcpyHostToDevice, stream_), "pass copy");
  device::check_cuda(cudaEventRecord(pass_copied_[pass_turn_], stream_), "pass copy");
  pass_turn_ ^= 1;
  n_ = n;
  // The kernel groups: each segment's kind by its own length only (the header says why).
  groups_.clear();
  for (uint32_t i = 0, j; i < n; i = j) {
    for (j = i + 1; j < n && tokens[j].seq == tokens[i].seq && tokens[j].pos == tokens[j - 1].pos + 1;) ++j;
    const bool fast = fast_prompt_ && j - i > kSmallPassTokens;
    if (!fast && !groups_.empty() && !groups_.back().fast) groups_.back().count += j - i;
    else groups_.push_back({i, j - i, fast, tokens[i].seq, tokens[i].pos});
  }
}

void GpuForward::write(Act a, std::span<const float> v) {
  if (v.size() != size_t(n_) * act_width(c_, a)) throw std::logic_error("write: not one row per token of the pass");
  device::check_cuda(cudaMemcpyAsync(buf(a), v.data(), v.size_bytes(), cudaMemcpyHostToDevice, stream_), "activation write");
  device::check_cuda(cudaStreamSynchronize(stream_), "activation write");
}

std::vector<float> GpuForward::read(Act a) {
  std::vector<float> v(size_t(n_) * act_width(c_, a));
  device::check_cuda(cudaMemcpyAsync(v.data(), buf(a), v.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_), "activation read");
  device::check_cuda(cudaStreamSynchronize(stream_), "activation read");
  return v;
}

// Token t's MoE FFN: router, top-k, each expert's GLU, their weighted sum into moe_acc_ row t. Experts in
// VRAM: each projection of the k experts in one launch. Fetched experts: expert by expert, each kernel
// after the wait for the part it reads (an overlapped fetch streams the rest meanwhile). Either way the
// same products, the same GLU and one weighted sum in routing order: the same bits.
void GpuForward::moe_token(const LayerWeights& l, const float* xn, uint32_t t, bool pregate_here) {
  cudaStream_t s = stream_;
  const uint32_t E = c_.n_embd, F = c_.n_ff, K = c_.n_expert_used;
  const WeightView& v = view_;
  ExpertSource* src = src_;
  const gpu_stream_t gs = reinterpret_cast<gpu_stream_t>(s);
  const float* weights = reinterpret_cast<const float*>(experts_ + K);
  const uint32_t parts = src ? ~0u : moe_parts_;  // llm_pass_compute times the in-VRAM kernels one part at a time
  route(gs, l, v, xn, router_, experts_, parts);
  if (!src) {
    if (parts & kMoeGateUp) {
      gpu_matvec_selected(gs, matrix(l.gate_exps, v.at(l.gate_exps), experts_), K, xn, 0, moe_gate_, F);
      add_expert_bias(s, v, l.gate_exps_b, experts_, K, moe_gate_);
      gpu_matvec_selected(gs, matrix(l.up_exps, v.at(l.up_exps), experts_), K, xn, 0, moe_up_, F);
      add_expert_bias(s, v, l.up_exps_b, experts_, K, moe_up_);
    }
    if (parts & kMoeGlu) gpu_glu(gs, moe_gate_, moe_up_, K * F, c_.act);
    if (parts & kMoeDown) {
      gpu_matvec_selected(gs, matrix(l.down_exps, v.at(l.down_exps), experts_), K, moe_gate_, F, moe_out_, E);
      add_expert_bias(s, v, l.down_exps_b, experts_, K, moe_out_);
    }
    if (parts & kMoeSum)
      weighted_sum_kernel<<<blocks_for(E, 128), 128, 0, s>>>(moe_acc_ + uint64_t(t) * E, moe_out_, weights, E, K);
    return;
  }
  {
    src->fetch(l.index, experts_, K, stream_);
    if (n_ == 1) pregate(l, *src);  // one token: the prediction is for its own next fetched layer
    else if (pregate_here) pregate_pass(l, *src, true);  // the pass's last fetch of this layer, token by token
    const stream::StagedExperts st = staged_ = stage_->next(*src, K, gs);
    for (uint32_t k = 0; k < K; ++k) {
      float* g = moe_gate_ + uint64_t(k) * F;
      launch_fetched(s, l.gate_exps, src, k, model::Projection::kGate, xn, g, *stage_, st);
      add_expert_bias(s, v, l.gate_exps_b, experts_ + k, 1, g);
      launch_fetched(s, l.up_exps, src, k, model::Projection::kUp, xn, moe_up_ + uint64_t(k) * F, *stage_, st);
      add_expert_bias(s, v, l.up_exps_b, experts_ + k, 1, moe_up_ + uint64_t(k) * F);
      gpu_glu(gs, g, moe_up_ + uint64_t(k) * F, F, c_.act);
      launch_fetched(s, l.down_exps, src, k, model::Projection::kDown, g, moe_out_ + uint64_t(k) * E, *stage_, st);
      add_expert_bias(s, v, l.down_exps_b, experts_ + k, 1, moe_out_ + uint64_t(k) * E);
    }
    src->consumed(l.index, gs);
  }
  weighted_sum_kernel<<<blocks_for(E, 128), 128, 0, s>>>(moe_acc_ + uint64_t(t) * E, moe_out_, weights, E, K);
}

// Layer l's routing of one normed token xn: its router's logits, then the top k ids in `ids` and their
// weights (floats) right after them. The routing and its prediction (pregate) both call this, so that
// a prediction is the routing it predicts, only on an earlier state. `parts` (MoePart): the router's
// product (kMoeRouter) and the top k (kMoeRoute), both unless a part is timed alone.
void GpuForward::route(gpu_stream_t s, const LayerWeights& l, WeightView v, const float* xn, float* logits, uint32_t* ids,
                       uint32_t parts) {
  const uint32_t K = c_.n_expert_used;
  if (parts & kMoeRouter)
    enqueue_matmul(reinterpret_cast<cudaStream_t>(s), l.gate_inp, v.at(l.gate_inp), xn, 1, f32(v, l.gate_inp_b), logits);
  if (parts & kMoeRoute) gpu_route(s, logits, c_.n_expert, K, ids, reinterpret_cast<float*>(ids + K), c_.gating);
}

// The next fetched layer's routing on this layer's post-attention state x_ (its own ffn norm, its
// router, the same top k), on the source's stream: these kernels and the reads they start overlap
// this layer's expert kernels. Why it predicts: the residual stream changes by a few layers' outputs
// between here and there, so the router sees nearly the same vector (pre-gated MoE). Where the
// source names ids of its own (the next pass's first fetched layer), those are read ahead instead.
void GpuForward::pregate(const LayerWeights& l, ExpertSource& src) {
  ExpertSource::PregateTarget p;
  if (!src.pregate_target(l.index, p)) return;
  const cudaStream_t side = reinterpret_cast<cudaStream_t>(src.pregate_stream());
  const uint32_t K = c_.n_expert_used, n = std::min(p.experts, K);
  device::check_cuda(cudaEventRecord(pre_x_, stream_), "pre-gating event");
  device::check_cuda(cudaStreamWaitEvent(side, pre_x_, 0), "pre-gating wait");
  // The source's own ids are copied on the side stream, where the prediction's placement reads them:
  // the compute stream may overwrite them (the next pass's routing) once it has waited for pre_read_.
  const LayerWeights* next = p.ids ? nullptr : &w_.layers.at(p.layer);
  if (next)
    rms_norm(side, x_, p.view.at(next->ffn_norm), c_.n_embd, 1, c_.rms_eps, xn_pre_);
  else
    device::check_cuda(cudaMemcpyAsync(pred_, p.ids, n * sizeof(uint32_t), cudaMemcpyDeviceToDevice, side), "pre-gating ids");
  device::check_cuda(cudaEventRecord(pre_read_, side), "pre-gating event");
  pre_pending_ = true;
  if (next) route(reinterpret_cast<gpu_stream_t>(side), *next, p.view, xn_pre_, router_pre_, pred_);
  device::check_cuda(cudaGetLastError(), "pre-gating kernels");
  src.prefetch_predicted(p.layer, pred_, n);
  pred_layer_ = ~0u;  // pred_ holds no pass's prediction now
}

// The same for a pass of n > 1 tokens: the next fetched layer's ffn norm and router on all n rows of x_
// (one launch each: the batched product and gpu_route_tokens, whose rows have route()'s bits, so each
// token's prediction is the routing it predicts, on an earlier state), then the union of the n
// top-k's, best first (pass_union_kernel), of which min(pass, n * experts) are read ahead: at most what
// the fetcher's cache holds beside the fetch in use (the executor's bound), so the reads evict none of
// this layer's experts. Its ids are also copied to the host for the grouped path's order
// (predicted_on_host). A source's own ids (the next pass's first fetched layer) are read as pregate()
// reads them.
void GpuForward::pregate_pass(const LayerWeights& l, ExpertSource& src, bool token_path) {
  ExpertSource::PregateTarget p;
  if (!src.pregate_target(l.index, p) || p.pass == 0 || (token_path && !p.token_path)) return;
  const cudaStream_t side = reinterpret_cast<cudaStream_t>(src.pregate_stream());
  const gpu_stream_t gside = reinterpret_cast<gpu_stream_t>(side);
  const uint32_t K = c_.n_expert_used;
  const uint32_t m = p.ids ? std::min(p.experts, K) : std::min({p.pass, p.experts * n_, K});
  if (m == 0) return;
  device::check_cuda(cudaEventRecord(pre_x_, stream_), "pre-gating event");
  device::check_cuda(cudaStreamWaitEvent(side, pre_x_, 0), "pre-gating wait");
  const LayerWeights* next = p.ids ? nullptr : &w_.layers.at(p.layer);
  if (next)
    rms_norm(side, x_, p.view.at(next->ffn_norm), c_.n_embd, n_, c_.rms_eps, xn_pre_);
  else
    device::check_cuda(cudaMemcpyAsync(pred_, p.ids, m * sizeof(uint32_t), cudaMemcpyDeviceToDevice, side), "pre-gating ids");
  device::check_cuda(cudaEventRecord(pre_read_, side), "pre-gating event");
  pre_pending_ = true;
  if (next) {
    enqueue_matmul(side, next->gate_inp, p.view.at(next->gate_inp), xn_pre_, n_, f32(p.view, next->gate_inp_b), router_pre_);
    gpu_route_tokens(gside, router_pre_, n_, c_.n_expert, K, routes_pre_, c_.gating);
    pass_union_kernel<<<1, kThreads, 2 * c_.n_expert * sizeof(float), side>>>(routes_pre_, n_, K, c_.n_expert, m, pred_);
  }
  device::check_cuda(cudaMemcpyAsync(pred_host_, pred_, m * sizeof(uint32_t), cudaMemcpyDeviceToHost, side), "pre-gating ids");
  device::check_cuda(cudaEventRecord(pred_copied_, side), "pre-gating event");
  device::check_cuda(cudaGetLastError(), "pre-gating kernels");
  pred_layer_ = p.layer, pred_n_ = m;
  ++pass_pregates_;
  src.prefetch_predicted(p.layer, pred_, m);
}

std::span<const uint32_t> GpuForward::predicted_on_host(uint32_t layer) {
  if (pred_layer_ != layer || pred_n_ == 0) return {};
  // Enqueued a layer or more ago on the side stream, ahead of the prefetch's kernels: done by now.
  device::check_cuda(cudaEventSynchronize(pred_copied_), "pre-gating ids");
  return {pred_host_, pred_n_};
}

void GpuForward::layer(const LayerWeights& l, WeightView v, ExpertSource* experts) {
  use_layer(v, experts);
  run_block(c_, l, *this);
}

std::span<const float> GpuForward::pass_logits() {
  const std::vector<uint32_t>& r = logit_rows_of_pass_;
  const bool runs = r.empty() || r.back() - r.front() + 1 == r.size();  // increasing: a run when it spans its count
  return logits_of(r.empty() ? 0 : r.front(), uint32_t(r.size()), !runs);
}

uint32_t GpuForward::enqueue_head() {
  const std::vector<uint32_t>& r = logit_rows_of_pass_;
  const bool runs = r.empty() || r.back() - r.front() + 1 == r.size();
  logits_of(r.empty() ? 0 : r.front(), uint32_t(r.size()), !runs, /*to_host=*/false);
  return uint32_t(r.size());
}

GreedyPick GpuForward::pass_pick() {
  if (logit_rows_of_pass_.size() != 1) throw std::logic_error("pass_pick: a pass with one row of logits");
  enqueue_head();
  if (!argmax_) argmax_ = std::make_unique<GpuArgmax>();
  argmax_->enqueue(stream_, logits_d_, c_.n_vocab);
  wait_pass();
  return argmax_->host();
}

void GpuForward::enqueue_pick(uint32_t slot) {
  if (logit_rows_of_pass_.size() != 1) throw std::logic_error("enqueue_pick: a pass with one row of logits");
  enqueue_head();
  if (!argmax_) argmax_ = std::make_unique<GpuArgmax>();
  argmax_->enqueue(stream_, logits_d_, c_.n_vocab, slot);
}

GreedyPick GpuForward::wait_pick(uint32_t slot) { return argmax_->wait(slot); }

void GpuForward::wait_pass() {
  // A blocking-sync event: the host thread sleeps until the pass is done instead of spinning a core
  // (CUDA's default stream synchronisation spins).
  if (pass_end_) device::check_cuda(cudaEventRecord(pass_end_, stream_), "pass end event");
  device::check_cuda(cudaEventRecord(done_, stream_), "token event");
  device::check_cuda(cudaEventSynchronize(done_), "token");
}

// Rows [first, first + rows) of the pass, or (gather) the pass's logit rows, gathered first; the output
// head multiplies them with the FP32 kernels, whose rows do not depend on how many there are.
std::span<const float> GpuForward::logits_of(uint32_t first, uint32_t rows, bool gather, bool to_host) {
  if (rows > logit_rows_)
    throw std::runtime_error("logits of " + std::to_string(rows) + " tokens asked; this GPU forward pass returns at most " + std::to_string(logit_rows_));
  const uint64_t V = c_.n_vocab, E = c_.n_embd;
  const float* from = x_ + first * E;
  if (gather && rows > 0) {
    gather_rows_kernel<<<dim3(blocks_for(E, 128), rows), 128, 0, stream_>>>(x_, logit_rows_dev(), uint32_t(E), tmp_);
    from = tmp_;
  }
  if (rows > 0) {
    rms_norm(stream_, from, globals_.output_norm, c_.n_embd, rows, c_.rms_eps, xn_);
    enqueue_matmul(stream_, w_.output, globals_.output, xn_, rows, nullptr, logits_d_);
    if (!to_host) return {};
    device::check_cuda(cudaMemcpyAsync(logits_host_, logits_d_, rows * V * sizeof(float), cudaMemcpyDeviceToHost, stream_), "logits copy");
  }
  if (!to_host) return {};
  wait_pass();
  return {logits_host_, rows * V};
}

}  // namespace gpunvme::llm
