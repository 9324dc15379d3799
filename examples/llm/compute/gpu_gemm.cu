#include "examples/llm/compute/gpu_gemm.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "device/cuda_check.h"
#include "examples/llm/compute/gpu_warp.cuh"

namespace gpunvme::llm {
namespace {

constexpr uint32_t kThreads = 256;
constexpr uint32_t kChunkAlign = 128;         // chunk rows: a multiple of the GEMM's tile heights
constexpr uint64_t kWorkspaceBytes = 32ull << 20;  // cuBLASLt's recommendation for Hopper
constexpr int kScaleTop = 15;                 // a token's largest element lands in [2^14, 2^15)
constexpr uint32_t kBuffers = 2;              // the weight scratch's halves: a chunk dequantized while the last multiplies

void check_lt(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt ") + what + ": " + cublasLtGetStatusString(st));
}

uint32_t blocks_for(uint64_t n, uint32_t per_block) {
  return uint32_t(std::min<uint64_t>((n + per_block - 1) / per_block, 1u << 20));  // kernels stride beyond
}

// Two floats rounded to nearest into a 32-bit pair of the 16-bit type (element a at the lower address).
template <GemmElem E>
__device__ inline uint32_t pack2(float a, float b) {
  if constexpr (E == GemmElem::kF16) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// Rows [0, rows) of the matrix at w into out (row-major, cols wide, 16-bit): a thread per 32-element
// group, dequantized by dequant_group (the kernels' per-type unpacking) and stored as four 16-byte words.
template <GgmlType T, GemmElem E>
__global__ void dequant_rows_kernel(const uint8_t* w, uint64_t row_bytes, uint32_t groups_per_row, uint64_t groups,
                                    uint4* out) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < groups; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t row = i / groups_per_row, g = i % groups_per_row;
    float v[kGroup];
    dequant_group<T>(w + row * row_bytes, g, v);
#pragma unroll
    for (int q = 0; q < kGroup / 8; ++q)
      out[i * (kGroup / 8) + q] = make_uint4(pack2<E>(v[8 * q], v[8 * q + 1]), pack2<E>(v[8 * q + 2], v[8 * q + 3]),
                                             pack2<E>(v[8 * q + 4], v[8 * q + 5]), pack2<E>(v[8 * q + 6], v[8 * q + 7]));
  }
}

// Token blockIdx.x's vector of cols floats into the 16-bit type, divided by a power of two s that puts
// its largest magnitude in [2^14, 2^15) (scale[token] = s): FP16's range holds any finite vector, and
// elements down to 2^-29 of the largest stay normal. s stays a normal float, so x / s is exact
// (a vector of zeros, infinities or NaNs keeps s = 1 and passes its values on).
template <GemmElem E>
__global__ void convert_tokens_kernel(const float* x, uint32_t cols, uint32_t* xh, float* scale) {
  __shared__ float part[kThreads / 32];
  x += uint64_t(blockIdx.x) * cols;
  xh += uint64_t(blockIdx.x) * cols / 2;
  float mx = 0.0f;
  for (uint32_t i = threadIdx.x; i < cols; i += blockDim.x) mx = fmaxf(mx, fabsf(x[i]));
  mx = gpu::warp_max(mx);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = mx;
  __syncthreads();
  mx = 0.0f;
  for (uint32_t p = 0; p < blockDim.x / 32; ++p) mx = fmaxf(mx, part[p]);
  int e = 0;
  frexpf(mx, &e);  // mx = f * 2^e, f in [0.5, 1)
  const int k = mx > 0.0f && isfinite(mx) ? max(-126, min(126, e - kScaleTop)) : 0;
  const float inv = ldexpf(1.0f, -k);
  for (uint32_t i = threadIdx.x; i < cols / 2; i += blockDim.x) xh[i] = pack2<E>(x[2 * i] * inv, x[2 * i + 1] * inv);
  if (threadIdx.x == 0) scale[blockIdx.x] = ldexpf(1.0f, k);
}

// y[t][r] = y[t][r] * scale[t] + bias[r]: the token's scale undone, the bias added.
__global__ void finish_kernel(float* y, uint32_t rows, uint64_t total, const float* scale, const float* bias) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += uint64_t(gridDim.x) * blockDim.x)
    y[i] = y[i] * scale[i / rows] + (bias ? bias[i % rows] : 0.0f);
}

template <class T>
T* device_alloc(uint64_t bytes, const char* what) {
  void* p = nullptr;
  device::check_cuda(cudaMalloc(&p, bytes), what);
  return static_cast<T*>(p);
}

// The largest power of two (at most 256) that divides the address: what the algorithm may assume.
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

}  // namespace

// cuBLASLt's handle, the operation (A^T B, FP32 accumulation and output), the preference (workspace),
// and the algorithm chosen per problem (asked once per shape: the heuristic costs tens of microseconds,
// and a prompt pass over a 70B model multiplies several hundred matrices). The dequantization runs on a
// stream of its own into two buffers in turn, so that it overlaps the previous chunk's product (at 512
// tokens it costs about two thirds of the product's time on an H200: 2 bytes written per weight).
struct TensorGemm::Lt {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  void* workspace = nullptr;
  uint4* w[kBuffers] = {};   // the weight scratch's halves: chunk rows x cols each, 16-bit
  cudaStream_t side = nullptr;  // the dequantization's
  cudaEvent_t start = nullptr;  // the caller's stream up to the call: weights and vectors written
  cudaEvent_t dequantized[kBuffers] = {}, multiplied[kBuffers] = {};  // per buffer: filled, and read by its product
  uint32_t* xh = nullptr;    // the tokens' vectors, 16-bit: max_tokens x max_cols
  float* scale = nullptr;    // [max_tokens]
  using Key = std::tuple<int, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t>;  // elem, m, n, k, ldc, y's alignment
  std::map<Key, cublasLtMatmulAlgo_t> algos;

  ~Lt() {
    if (side) cudaStreamSynchronize(side);
    if (op) cublasLtMatmulDescDestroy(op);
    if (handle) cublasLtDestroy(handle);
    for (void* p : {workspace, static_cast<void*>(w[0]), static_cast<void*>(w[1]), static_cast<void*>(xh), static_cast<void*>(scale)})
      cudaFree(p);
    for (cudaEvent_t e : {start, dequantized[0], dequantized[1], multiplied[0], multiplied[1]})
      if (e) cudaEventDestroy(e);
    if (side) cudaStreamDestroy(side);
  }

  // D (m x n, column-major, ld ldc, FP32) = A^T B: A k x m (the weight rows, ld k), B k x n (the tokens, ld k).
  void run(cudaStream_t s, GemmElem e, uint32_t m, uint32_t n, uint32_t k, const void* a, const void* b, float* d, uint32_t ldc) {
    const cudaDataType_t t = e == GemmElem::kF16 ? CUDA_R_16F : CUDA_R_16BF;
    struct Layout {
      cublasLtMatrixLayout_t l = nullptr;
      Layout(cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld) {
        check_lt(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld), "matrix layout");
      }
      ~Layout() { cublasLtMatrixLayoutDestroy(l); }
    } la(t, k, m, k), lb(t, k, n, k), ld(CUDA_R_32F, m, n, ldc);
    const Key key{int(e), m, n, k, ldc, alignment_of(d)};
    auto it = algos.find(key);
    if (it == algos.end()) {
      struct Pref {
        cublasLtMatmulPreference_t p = nullptr;
        Pref() { check_lt(cublasLtMatmulPreferenceCreate(&p), "preference"); }
        ~Pref() { cublasLtMatmulPreferenceDestroy(p); }
      } pref;
      const uint64_t ws = kWorkspaceBytes;
      const uint32_t align_d = std::get<5>(key);
      check_lt(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), "workspace");
      check_lt(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof align_d), "alignment");
      check_lt(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d), "alignment");
      cublasLtMatmulHeuristicResult_t r{};
      int found = 0;
      check_lt(cublasLtMatmulAlgoGetHeuristic(handle, op, la.l, lb.l, ld.l, ld.l, pref.p, 1, &r, &found), "heuristic");
      if (found == 0)
        throw std::runtime_error("cuBLASLt has no algorithm for a " + std::to_string(m) + " x " + std::to_string(k) + " by " +
                                 std::to_string(k) + " x " + std::to_string(n) + " product");
      it = algos.emplace(key, r.algo).first;
    }
    const float alpha = 1.0f, beta = 0.0f;
    check_lt(cublasLtMatmul(handle, op, &alpha, a, la.l, b, lb.l, &beta, d, ld.l, d, ld.l, &it->second, workspace,
                            kWorkspaceBytes, s),
             "matmul");
  }
};

TensorGemm::TensorGemm(uint32_t max_tokens, uint32_t max_cols, uint64_t weight_scratch_bytes)
    : max_tokens_(max_tokens), max_cols_(max_cols), lt_(std::make_unique<Lt>()) {
  if (max_tokens == 0 || max_cols == 0 || max_cols % kGroup != 0)
    throw std::logic_error("TensorGemm: passes of 1+ tokens of a whole number of 32-element groups");
  // At least one aligned chunk of the widest rows per buffer, whatever was asked.
  scratch_bytes_ = std::max<uint64_t>(weight_scratch_bytes / kBuffers * kBuffers, uint64_t(kBuffers) * kChunkAlign * max_cols * 2);
  check_lt(cublasLtCreate(&lt_->handle), "create");
  check_lt(cublasLtMatmulDescCreate(&lt_->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "operation");
  const cublasOperation_t trans = CUBLAS_OP_T;
  check_lt(cublasLtMatmulDescSetAttribute(lt_->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans), "transpose");
  lt_->workspace = device_alloc<void>(kWorkspaceBytes, "cudaMalloc of cuBLASLt's workspace");
  for (uint4*& w : lt_->w) w = device_alloc<uint4>(scratch_bytes_ / kBuffers, "cudaMalloc of the tensor-core product's weight scratch");
  device::check_cuda(cudaStreamCreateWithFlags(&lt_->side, cudaStreamNonBlocking), "the tensor-core product's stream");
  for (cudaEvent_t* e : {&lt_->start, &lt_->dequantized[0], &lt_->dequantized[1], &lt_->multiplied[0], &lt_->multiplied[1]})
    device::check_cuda(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "the tensor-core product's events");
  lt_->xh = device_alloc<uint32_t>(uint64_t(max_tokens) * max_cols * 2, "cudaMalloc of the tensor-core product's inputs");
  lt_->scale = device_alloc<float>(uint64_t(max_tokens) * sizeof(float), "cudaMalloc of the tensor-core product's scales");
}

TensorGemm::~TensorGemm() = default;

uint64_t TensorGemm::device_bytes() const {
  return kWorkspaceBytes + scratch_bytes_ + uint64_t(max_tokens_) * max_cols_ * 2 + uint64_t(max_tokens_) * sizeof(float);
}

uint32_t TensorGemm::chunk_rows(uint32_t cols) const {
  return uint32_t(std::max<uint64_t>(kChunkAlign, scratch_bytes_ / kBuffers / (uint64_t(cols) * 2) / kChunkAlign * kChunkAlign));
}

void TensorGemm::matmul(gpu_stream_t stream, const GpuMatrix& m, const float* x, uint32_t n, const float* bias, float* y) {
  if (m.sel) throw std::logic_error("TensorGemm: a stack picked by a device-side id takes the FP32 kernels");
  if (n == 0 || n > max_tokens_ || m.cols > max_cols_ || m.cols % kGroup != 0)
    throw std::logic_error("TensorGemm: " + std::to_string(n) + " tokens of " + std::to_string(m.cols) +
                           " columns, beyond the sizes it was made for (" + std::to_string(max_tokens_) + " of " +
                           std::to_string(max_cols_) + ")");
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  const GemmElem e = gemm_elem_for(m.type);
  const uint32_t groups = m.cols / kGroup, chunk = chunk_rows(m.cols);
  with_weight_type(m.type, [&](auto type) {
    constexpr GgmlType T = decltype(type)::value;
    auto run = [&]<GemmElem E>() {
      Lt& lt = *lt_;
      // The side stream starts after everything queued on s so far (the weights may be a copy queued there;
      // the previous call's products, which read the buffers, are queued there too).
      device::check_cuda(cudaEventRecord(lt.start, s), "tensor-core product event");
      device::check_cuda(cudaStreamWaitEvent(lt.side, lt.start, 0), "tensor-core product wait");
      convert_tokens_kernel<E><<<n, kThreads, 0, s>>>(x, m.cols, lt.xh, lt.scale);
      uint32_t i = 0;
      for (uint32_t r0 = 0; r0 < m.rows; r0 += chunk, ++i) {
        const uint32_t rows = std::min(chunk, m.rows - r0), b = i % kBuffers;
        const uint64_t g = uint64_t(rows) * groups;
        if (i >= kBuffers) device::check_cuda(cudaStreamWaitEvent(lt.side, lt.multiplied[b], 0), "tensor-core product wait");
        dequant_rows_kernel<T, E><<<blocks_for(g, kThreads), kThreads, 0, lt.side>>>(m.w + uint64_t(r0) * m.row_bytes,
                                                                                      m.row_bytes, groups, g, lt.w[b]);
        device::check_cuda(cudaEventRecord(lt.dequantized[b], lt.side), "tensor-core product event");
        device::check_cuda(cudaStreamWaitEvent(s, lt.dequantized[b], 0), "tensor-core product wait");
        lt.run(s, E, rows, n, m.cols, lt.w[b], lt.xh, y + r0, m.rows);
        device::check_cuda(cudaEventRecord(lt.multiplied[b], s), "tensor-core product event");
      }
    };
    if (e == GemmElem::kF16) run.template operator()<GemmElem::kF16>();
    else run.template operator()<GemmElem::kBF16>();
  });
  const uint64_t total = uint64_t(n) * m.rows;
  finish_kernel<<<blocks_for(total, kThreads), kThreads, 0, s>>>(y, m.rows, total, lt_->scale, bias);
  device::check_cuda(cudaGetLastError(), "tensor-core product kernels");
}

void gpu_gemm_inputs(gpu_stream_t stream, GemmElem e, const float* x, uint32_t n, uint32_t cols, void* xh, float* scale) {
  if (n == 0) return;
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  uint32_t* h = static_cast<uint32_t*>(xh);
  if (e == GemmElem::kF16) convert_tokens_kernel<GemmElem::kF16><<<n, kThreads, 0, s>>>(x, cols, h, scale);
  else convert_tokens_kernel<GemmElem::kBF16><<<n, kThreads, 0, s>>>(x, cols, h, scale);
}

void gpu_matmul_pass(gpu_stream_t s, TensorGemm* gemm, const GpuMatrix& m, const float* x, uint32_t n, const float* bias,
                     float* y) {
  if (gemm && n > kSmallPassTokens && !m.sel) return gemm->matmul(s, m, x, n, bias, y);
  gpu_matmul(s, m, x, n, bias, y);
}

}  // namespace gpunvme::llm
