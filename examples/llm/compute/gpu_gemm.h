// The tensor-core product for prompt passes (issue 36): a pass of more than kSmallPassTokens tokens
// multiplies each matrix on the tensor cores instead of the small passes' batched kernel (gpu_matmul.h, about
// 4.4 TFLOP/s on an H200). The matrix is dequantized on the GPU, a chunk of rows at a time, into a 16-bit
// scratch buffer by the kernels' own per-type unpacking (dequant.h's dequant_group, the one decoder of
// every type), the tokens' vectors are converted to the same 16-bit type, and cuBLASLt multiplies them
// with FP32 accumulation into the FP32 outputs; the bias is added after.
//
// Why a size threshold: a pass of 1..kSmallPassTokens tokens (decode, speculative verification) keeps
// the small-pass kernels (FP32, or 8-bit x for the types gpu_matmul.h's 8-bit path takes), whose (row,
// token) results have the same bits whatever the pass's size; speculative
// decoding's output is plain greedy decoding's and streamed = resident to the bit rely on that. A prompt
// pass on tensor cores differs from token-by-token passes in the last bits, as llama.cpp's do.
//
// The 16-bit type, per weight type (elem_for): FP16 for the quantized types, F16 and F32, BF16 for BF16
// and MXFP4. FP16 keeps 11 significant bits to BF16's 8, so its rounding of the inputs is 8 times
// smaller (llama.cpp's own cuBLAS route converts to FP16 too; its MMQ route rounds the activations to
// 8-bit integers, coarser still). Its range is the risk: the quantized types' values are fp16 scales
// times small integers and F16 weights are FP16 already, but activations can exceed 65504 (outlier
// features), so each token's vector is scaled by a power of two that puts its largest element in
// [2^14, 2^15) and the output multiplied back (exact: only exponents change). BF16 and MXFP4 weights
// are exact in BF16 (MXFP4: two-bit mantissas times power-of-two scales that may leave FP16's range).
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>

#include "examples/llm/compute/gpu_matmul.h"
#include "examples/llm/quant/dequant.h"

namespace gpunvme::llm {

// Passes of at most this many tokens stay on the small-pass kernels (bitwise as single-token passes); longer
// ones take the tensor cores (a speculative pass is the draft + 1, at most 32 rows of logits).
inline constexpr uint32_t kSmallPassTokens = 32;

// Default bytes of the dequantized-weights scratch, two buffers in turn (a chunk is dequantized while the
// previous one multiplies): Llama-3-70B's 28672 x 8192 gate in 7 chunks of 4096 rows, its down in 8 of 1152.
inline constexpr uint64_t kGemmWeightScratchBytes = 128ull << 20;

enum class GemmElem { kF16, kBF16 };
constexpr GemmElem gemm_elem_for(GgmlType t) {
  return t == GgmlType::BF16 || t == GgmlType::MXFP4 ? GemmElem::kBF16 : GemmElem::kF16;
}

// Unit roundoff of a 16-bit type (half its epsilon): what rounding one input to it may change, relative.
inline constexpr double gemm_unit_roundoff(GemmElem e) { return e == GemmElem::kF16 ? 0x1p-11 : 0x1p-8; }

// How far the tensor-core product of a row of type t (cols wide) and a vector x may be from the FP32
// kernels' (tests/gpu/test_llm_gemm.cpp and bench/llm_pass_compute --gemm hold it to this). With
// S = sum_i |w_i x_i|, the scale float error is measured against (the output's own relative error is
// unbounded where the sum cancels):
//   (2u + u^2) S        each w_i and x_i rounded to nearest in the 16-bit type (unit roundoff u), so
//                       each product is off by at most (1 + u)^2 - 1 of itself;
//   + 2^-25 sum |x_i|   FP16 only: a weight under 2^-14 is subnormal there, rounded to an absolute 2^-25
//                       (the activations are scaled so that theirs stay normal; BF16 has FP32's range);
//   + 1e-5 S + 1e-6     both sides accumulate in FP32 in different orders (the batched kernel's test
//                       gives it the same tolerance against the CPU's sum).
// The bias is added in FP32 on both sides. A wrong layout, transpose, chunk or scale misses by O(S).
inline double gemm_error_bound(GgmlType t, const uint8_t* row, uint32_t cols, const float* x) {
  const GemmElem e = gemm_elem_for(t);
  const double u = gemm_unit_roundoff(e);
  double s = 0, sx = 0;
  float g[kGroup];
  for (uint32_t grp = 0; grp < cols / kGroup; ++grp) {
    dequant_group(t, row, grp, g);
    for (int l = 0; l < kGroup; ++l) {
      s += std::fabs(double(g[l]) * x[grp * kGroup + l]);
      sx += std::fabs(double(x[grp * kGroup + l]));
    }
  }
  return (2 * u + u * u) * s + (e == GemmElem::kF16 ? 0x1p-25 * sx : 0.0) + 1e-5 * s + 1e-6;
}

// The tensor-core product's GPU state, owned by whoever owns the activations (GpuForward): the cuBLASLt
// handle and workspace, the weight scratch, the 16-bit copy of the tokens' vectors and their scales.
// Sized once for passes of up to max_tokens vectors of up to max_cols; all of it on the current device.
// One stream at a time: the scratch buffers are reused by each call, in stream order.
class TensorGemm {
 public:
  TensorGemm(uint32_t max_tokens, uint32_t max_cols, uint64_t weight_scratch_bytes = kGemmWeightScratchBytes);
  ~TensorGemm();
  TensorGemm(const TensorGemm&) = delete;
  TensorGemm& operator=(const TensorGemm&) = delete;

  // y[t * rows + r] = W[r] . x[t * cols ..] (+ bias[r]) for t < n, enqueued on `s`. m.sel must be null
  // (a stack picked by a device-side id: gpu_matmul_pass keeps those on the small-pass kernels). Throws
  // std::logic_error for n or cols beyond the sizes given at construction.
  void matmul(gpu_stream_t s, const GpuMatrix& m, const float* x, uint32_t n, const float* bias, float* y);

  uint64_t device_bytes() const;
  uint32_t max_tokens() const { return max_tokens_; }
  uint32_t max_cols() const { return max_cols_; }
  // Rows of a matrix `cols` wide that one chunk (half the weight scratch) holds: a multiple of 128.
  uint32_t chunk_rows(uint32_t cols) const;

 private:
  struct Lt;  // cuBLASLt's handle and the chosen algorithms (gpu_gemm.cu: keeps cublasLt.h out of here)
  uint32_t max_tokens_, max_cols_;
  uint64_t scratch_bytes_;
  std::unique_ptr<Lt> lt_;
};

// The tensor-core products' inputs: n vectors of `cols` floats (a multiple of 32) at x into the 16-bit
// type e at xh (n x cols elements), each divided by the power of two scale[t] that puts its largest
// magnitude in [2^14, 2^15) (see the header's comment); a vector's result depends on it alone. The
// grouped MoE's expert products (gpu_expert_mma.h) take their inputs from here too.
void gpu_gemm_inputs(gpu_stream_t s, GemmElem e, const float* x, uint32_t n, uint32_t cols, void* xh, float* scale);

// A pass's matrix product: the small-pass kernels (gpu_matmul) for n <= kSmallPassTokens, without `gemm`, or
// for a stack picked by a device-side id; the tensor cores otherwise.
void gpu_matmul_pass(gpu_stream_t s, TensorGemm* gemm, const GpuMatrix& m, const float* x, uint32_t n, const float* bias,
                     float* y);

}  // namespace gpunvme::llm
