// Matrix times vectors on the GPU for the engine: the single-token matrix-vector kernel (the vector
// staged in shared memory, a warp per one or two rows, the rows' bytes copied to shared memory 32 groups
// at a time with 16-byte loads where they are 16-byte aligned, weights dequantized in registers by the
// lane that owns the group) and the batched kernel for a pass of several tokens, in which a
// warp dequantizes its row in registers once per tile of 8 tokens and multiplies it by each token's
// vector (the vectors staged in shared memory a chunk at a time, once per block of 8 rows). The batched
// kernel adds in the matrix-vector kernel's order (each lane its groups, then the same butterfly), so a
// (row, token) result has the same bits whichever kernel computed it: a batched pass gives the logits of
// single-token passes (tests/gpu/test_llm_matmul.cpp holds them equal).
#pragma once
#include <cstdint>
#include <span>

#include "examples/llm/model/config.h"
#include "examples/llm/quant/blocks.h"

namespace gpunvme::llm {

using gpu_stream_t = struct CUstream_st*;

// Tokens the batched kernel multiplies per read of a weight row: a pass of n tokens reads every weight
// ceil(n / kBatchTileTokens) times. Weights in mapped host memory (a streamed layer's slot) are
// therefore copied to GPU memory once when a pass has more tokens than this (gpu_executor.cpp).
inline constexpr uint32_t kBatchTileTokens = 8;

// The single-token staged kernels take gpu_rows_lean.cuh's row loops where the rows allow and cap a
// launch's blocks at what the device holds at once (issue 36). Measured on an H200 (llm_pass_compute
// --decode-pass, Llama-3-8B Q4_K, products of one token's layers as a graph): the loops before them 4.30
// ms, these 2.96, the same bits. Tried and removed, both slower: Q4_K's rows copied through shared memory
// as Q6_K's are (3.44 ms), and each warp asking the L2 cache for its next rows ahead (prefetch.global.L2, 3.15).

// Matrix `*sel` (when given, in device memory) of a stack of mat_bytes each, else the matrix at w.
struct GpuMatrix {
  GgmlType type = GgmlType::F32;
  const uint8_t* w = nullptr;
  uint64_t row_bytes = 0;
  uint32_t rows = 0, cols = 0;
  const uint32_t* sel = nullptr;
  uint64_t mat_bytes = 0;
};

// y[t * rows + r] = W[r] . x[t * cols .. + cols) (+ bias[r]) for t < n, enqueued on `s`: the
// matrix-vector kernel for n == 1, the batched kernel otherwise.
void gpu_matmul(gpu_stream_t s, const GpuMatrix& m, const float* x, uint32_t n, const float* bias, float* y);

// One matrix-vector product per selected matrix of a stack, in one launch (MoE: the k routed experts'
// projections): y[j * y_stride + r] = W_{m.sel[j]}[r] . x[j * x_stride ..] for j < count; m.sel (device
// memory) holds count matrix indexes. Each product has gpu_matmul's bits for that matrix and vector.
void gpu_matvec_selected(gpu_stream_t s, const GpuMatrix& m, uint32_t count, const float* x, uint64_t x_stride,
                         float* y, uint64_t y_stride);

// The warp-per-row matrix-vector kernel that reads x from global memory: gpu_matmul's fallback for rows
// too wide for x to fit in a block's shared memory, and the reference the staged kernel (gpu_rows.cuh)
// is held equal to, bit for bit (tests/gpu/test_llm_matmul.cpp, bench/llm_pass_compute).
void gpu_matvec_unstaged(gpu_stream_t s, const GpuMatrix& m, const float* x, const float* bias, float* y);

// One token's products of one input with several matrices (a layer's Q, K and V): y = W x (+ bias) for
// each. Consecutive products whose matrices share a type and a width run in one launch of the staged
// kernel over their rows together (a decode layer's three launches become one: issue 36); the others,
// and rows too wide to stage x for, one launch each. Every result has gpu_matmul's bits for n = 1: a
// row's arithmetic is the same whichever warp computes it (tests/gpu/test_llm_matmul.cpp). No stacks
// (sel must be null).
struct GpuProduct {
  GpuMatrix m;
  const float* bias = nullptr;
  float* y = nullptr;
};
void gpu_matvecs(gpu_stream_t s, std::span<const GpuProduct> ps, const float* x);
// gpu_matvecs on x's RMS norm times norm_w (n = the matrices' width) instead of x, the norm computed by
// every block of the launch while it stages x, with the norm kernel's bits (gpu_norm.cuh): the layer's
// input norm and its Q, K and V in one launch. Returns false, enqueuing nothing, unless the products
// (1 to 3) share a type and a width, x fits in shared memory and norm_w is in GPU memory (each block reads
// it: a streamed slot in host memory keeps the norm kernel): the caller then runs the norm kernel and
// gpu_matvecs.
bool gpu_matvecs_normed(gpu_stream_t s, std::span<const GpuProduct> ps, const float* x, const float* norm_w, float eps);

// A gated FFN's input side for one token in one launch: y[r] = glu(act, gate[r] . x, up[r] . x) (ops.h),
// gate row r and up row r computed by the same warp, the GLU in the kernel's epilogue: the bits of
// gpu_matmul's two products (no bias) and then the element-wise GLU. With norm_w, of x's RMS norm times
// norm_w instead of x, as gpu_matvecs_normed. Returns false, enqueuing nothing, where the two matrices
// differ in type or shape, are stacks, x is too wide to stage, or norm_w is not in GPU memory (the caller
// then runs the norm, the products and the GLU apart).
bool gpu_matvec_glu(gpu_stream_t s, const GpuMatrix& gate, const GpuMatrix& up, const float* x, FfnAct act, float* y,
                    const float* norm_w = nullptr, float eps = 0.0f);

// y[r] += W[r] . x (+ bias[r]) for one token: the residual add in the product's epilogue (an FFN's down
// projection into the residual stream), with the bits of gpu_matmul into a scratch vector and then
// y += it. Returns false, enqueuing nothing, where x is too wide to stage or m is a stack.
bool gpu_matvec_add(gpu_stream_t s, const GpuMatrix& m, const float* x, const float* bias, float* y);

// y += RMS norm of (W x + bias) times norm_w for one token, in one launch (a product, its post-norm and
// the residual add: Gemma 3's O and down projections): the product into tmp (m.rows floats) with
// gpu_matmul's bits, then the launch's last block to finish (counted in *done) adds the norm as
// Backend::norm_add's kernel does (gpu_norm.cuh's norm_add_block): the bits of the three operations. `done`
// is the caller's counter in GPU memory, 0 before the first launch; the last block sets it back to 0, so
// launches using one counter must run one after another (one stream). Returns false, enqueuing nothing,
// where x is too wide to stage or m is a stack.
bool gpu_matvec_norm_add(gpu_stream_t s, const GpuMatrix& m, const float* x, const float* bias, float* tmp, const float* norm_w,
                         float eps, float* y, uint32_t* done);

// gate[i] = glu(act, gate[i], up[i]) for i < n (ops.h), element by element: the GLU of every pass but a
// single token's dense FFN (which gpu_matvec_glu computes in its epilogue, with these bits).
void gpu_glu(gpu_stream_t s, float* gate, const float* up, uint32_t n, FfnAct act);

// Issue 36: products of Q4_K, Q6_K and Q8_0 rows with x quantised to 8-bit blocks and integer dot
// products (gpu_rows_q8.cuh, quant/q8_dot.h): other bits than the FP32 kernels' (x's rounding). Every entry
// takes them for the types switched on, with one token's bits for each token and row: one token
// (gpu_matmul with n = 1, gpu_matvecs and its normed form, gpu_matvec_glu, gpu_matvec_add), passes of
// several (gpu_matmul, gpu_matmul_batched: gpu_rows_q8_batch.cuh) and a stack's selected matrices
// (gpu_matvec_selected), and the fused MoE token's experts (gpu_moe_token.h); gpu_matvec_norm_add and
// the fused MoE token with an 8-bit router decline them, so their callers' unfused operations take them. On for the types GPUNVME_MATVEC_Q8 names (read at the first
// product; unset: q8_types.h's kDefaultQ8Types): 1 (all three), 0 or a list, e.g. q6_k,q8_0.
// gpu_set_matvec_q8(on): all or none; gpu_matvec_q8: on for any type; the _types forms: bit i for
// kQ8Types[i]; gpu_matvec_q8_takes: whether products of type t, cols wide, take the 8-bit kernels.
bool gpu_matvec_q8();
void gpu_set_matvec_q8(bool on);
uint32_t gpu_matvec_q8_types();
void gpu_set_matvec_q8_types(uint32_t types);
bool gpu_matvec_q8_takes(GgmlType t, uint32_t cols);

// The batched kernel for any n (n == 1 included, for the tests) and any row width.
void gpu_matmul_batched(gpu_stream_t s, const GpuMatrix& m, const float* x, uint32_t n, const float* bias, float* y);

}  // namespace gpunvme::llm
