// Prompt attention on the tensor cores (issue 36): at 2,048 tokens the FP32 flash kernel
// (gpu_flash_attention.cuh) made attention the larger part of Llama-3-8B's prompt, while the products
// already ran on the tensor cores. FlashAttention-2's scheme: a block takes kBlockM = 64 queries of one
// head (16 a warp), walks the cache's positions kN at a time, K and V tiles double-buffered in shared
// memory by cp.async; each warp computes its 16 x kN scores S = Q K^T with mma.sync m16n8k16 (FP16 Q
// and K, FP32 sums), masks them (causal, window), keeps the running maximum and sum per row in FP32
// (the online softmax), rounds P = exp(S - max) to FP16 in the registers S came in (the C fragment of
// two n-tiles is the A fragment of one k-step) and adds P V (FP16 V, FP32 sums) to its 16 x head_dim
// output in registers. The sink joins the maximum and the sum at the end, as in the FP32 kernel.
//
// Numerics: the cache is FP16 already (as on the CPU and in llama.cpp); Q is scaled in FP32 and rounded
// to FP16 once, P is rounded to FP16 and the sum is of the rounded P, so each output is a convex
// combination of V rows whose weights carry the roundings of Q (a score's error at most 2^-11 times
// scale times sum_d |q_d k_d|) and of P (2^-11 relative): tests/gpu/test_llm_ops.cpp's bound.
#include "examples/llm/compute/gpu_flash_mma.h"

#include <stdexcept>

#include "device/cuda_check.h"
#include "examples/llm/compute/gpu_rows.cuh"
#include "examples/llm/compute/ops.h"

namespace gpunvme::llm::gpu {
namespace {

constexpr uint32_t kWarps = 4;
constexpr uint32_t kBlockM = 16 * kWarps;  // queries of a block: 16 rows of the mma per warp
constexpr float kLog2e = 1.4426950408889634f;

// Positions per step (64; 32 for heads of 256, whose 16 x 256 FP32 output already takes 128 registers)
// and a shared row's halves: the head and 16 bytes, so the 8 rows one ldmatrix reads start in 8
// different 4-bank groups (conflict-free).
template <uint32_t D>
struct Tiles {
  static constexpr uint32_t kN = D >= 256 ? 32 : 64;
  static constexpr uint32_t kStride = D + 8;
  static constexpr uint32_t kSharedBytes = (kBlockM + 4 * kN) * kStride * uint32_t(sizeof(__half));  // Q, 2 x K, 2 x V
};

__device__ inline uint32_t shared_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// 16 bytes global -> shared, or 16 zero bytes where `valid` is false (past the block's last position:
// zeros, never stale NaN bits, meet the zero weights there).
__device__ inline void cp_async_16_or_zero(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

// Four 8x8 FP16 matrices from shared memory (lane l gives row l % 8 of matrix l / 8), as mma fragments;
// .trans hands each lane a column pair instead of a row pair (V's B fragments from row-major V).
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const __half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const __half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

// c += a (16x16, row-major FP16) x b (16x8, column-major FP16), FP32 sums.
__device__ inline void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ inline float exp2_approx(float x) {  // ex2.approx: -inf gives 0; relative error about 2^-22
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats rounded to one FP16 pair (the low half first, as the fragments want), and their rounded sum.
__device__ inline uint32_t pack_half2(float lo, float hi, float& sum) {
  const __half2 h = __floats2half2_rn(lo, hi);
  const float2 back = __half22float2(h);
  sum += back.x + back.y;
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Block (h, y): query head h; queries t0 .. t0 + 63 of the pass with t0 from the last block down (the
// causal blocks of late queries have the most positions: they start first). Thread (warp w, lane)
// holds rows g = lane / 4 and g + 8 of the warp's 16, columns 2 (lane % 4) and + 1 of each 8-column
// n-tile: the mma's C layout.
template <uint32_t D>
__global__ void __launch_bounds__(kWarps * 32)
    flash_mma_kernel(const float* q, const __half* kc, const __half* vc, uint32_t kv_dim, uint32_t group, uint32_t window,
                     uint32_t pos0, uint32_t n, float scale, const float* sinks, float* out) {
  constexpr uint32_t N = Tiles<D>::kN, S = Tiles<D>::kStride;
  constexpr bool kQInRegisters = D <= 128;  // Gemma's 256: Q's fragments read from shared memory at each step
  extern __shared__ __align__(16) unsigned char flash_mma_shared[];
  __half* qs = reinterpret_cast<__half*>(flash_mma_shared);  // [kBlockM][S]
  __half* ks = qs + kBlockM * S;                             // [2][N][S]
  __half* vs = ks + 2 * N * S;                               // [2][N][S]
  const uint32_t h = blockIdx.x, heads = gridDim.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t t0 = (gridDim.y - 1 - blockIdx.y) * kBlockM, tq = min(kBlockM, n - t0);
  auto first_of = [&](uint32_t pos) { return window && pos + 1 > window ? pos + 1 - window : 0u; };
  const uint32_t lo = first_of(pos0 + t0), hi = pos0 + t0 + tq - 1;  // the block's positions (first_of is monotonic)
  const uint32_t steps = (hi - lo) / N + 1;
  const __half* kh = kc + uint64_t(h / group) * D;
  const __half* vh = vc + uint64_t(h / group) * D;

  auto load = [&](uint32_t step) {  // positions lo + step * N .. into buffer step % 2
    const uint32_t p0 = lo + step * N;
    __half* kd = ks + (step & 1) * N * S;
    __half* vd = vs + (step & 1) * N * S;
    for (uint32_t i = threadIdx.x; i < N * D / 8; i += blockDim.x) {
      const uint32_t j = i / (D / 8), c = i % (D / 8) * 8;
      const bool valid = p0 + j <= hi;
      const uint64_t at = valid ? uint64_t(p0 + j) * kv_dim + c : 0;
      cp_async_16_or_zero(kd + j * S + c, kh + at, valid);
      cp_async_16_or_zero(vd + j * S + c, vh + at, valid);
    }
    cp_async_commit();
  };
  load(0);
  // Q's rows, scaled in FP32 and rounded to FP16 once; rows past the pass are zeros (never written out).
  for (uint32_t i = threadIdx.x; i < kBlockM * D / 2; i += blockDim.x) {
    const uint32_t r = i / (D / 2), d = i % (D / 2) * 2;
    float2 v = make_float2(0.0f, 0.0f);
    if (r < tq) v = *reinterpret_cast<const float2*>(q + (uint64_t(t0 + r) * heads + h) * D + d);
    *reinterpret_cast<__half2*>(qs + r * S + d) = __floats2half2_rn(v.x * scale, v.y * scale);
  }
  __syncthreads();

  const uint32_t r0 = warp * 16, g = lane / 4, tig = lane % 4;
  // ldmatrix rows: A (Q, row-major): matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15), rows first; B of
  // K^T (K row-major is K^T column-major): (positions 0-7, dims 0-7), (0-7, 8-15), (8-15, 0-7), (8-15,
  // 8-15); B of V (.trans): (positions 0-7, dims 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
  const __half* qa = qs + (r0 + (lane & 7) + (lane >> 3 & 1) * 8) * S + (lane >> 4) * 8;
  const uint32_t k_row = ((lane & 7) + (lane >> 4) * 8) * S + (lane >> 3 & 1) * 8;
  const uint32_t v_row = ((lane & 7) + (lane >> 3 & 1) * 8) * S + (lane >> 4) * 8;
  uint32_t qf[kQInRegisters ? D / 16 : 1][4];
  if constexpr (kQInRegisters) {
#pragma unroll
    for (uint32_t kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[kk], qa + kk * 16);
  }

  float o[D / 8][4];
#pragma unroll
  for (uint32_t j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's columns only, summed at the end
  const uint32_t pos_r[2] = {pos0 + t0 + r0 + g, pos0 + t0 + r0 + g + 8};
  const uint32_t first_r[2] = {first_of(pos_r[0]), first_of(pos_r[1])};
  const bool live = r0 < tq;  // a warp of padding rows only computes nothing
  const uint32_t warp_lo = pos0 + t0 + r0, warp_hi = pos0 + t0 + min(r0 + 15, tq - 1);

  for (uint32_t step = 0; step < steps; ++step) {
    if (step + 1 < steps) {
      load(step + 1);  // into the buffer the last step read (the barrier at its end)
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint32_t p0 = lo + step * N;
    if (live && p0 <= warp_hi && p0 + N - 1 >= first_of(warp_lo)) {  // warp-uniform: some position of the tile seen
      const __half* kt = ks + (step & 1) * N * S;
      const __half* vt = vs + (step & 1) * N * S;
      float s[N / 8][4];
#pragma unroll
      for (uint32_t j = 0; j < N / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
      for (uint32_t kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4];
        if constexpr (kQInRegisters) {
#pragma unroll
          for (uint32_t i = 0; i < 4; ++i) a[i] = qf[kk][i];
        } else {
          ldmatrix_x4(a, qa + kk * 16);
        }
#pragma unroll
        for (uint32_t jj = 0; jj < N / 16; ++jj) {
          uint32_t b[4];
          ldmatrix_x4(b, kt + k_row + jj * 16 * S + kk * 16);
          mma_16816(s[2 * jj], a, b[0], b[1]);
          mma_16816(s[2 * jj + 1], a, b[2], b[3]);
        }
      }
      // Causal and windowed per row; only tiles that cross a row's bounds need it (warp-uniform test).
      if (p0 + N - 1 > warp_lo || p0 < first_of(warp_hi)) {
#pragma unroll
        for (uint32_t j = 0; j < N / 8; ++j)
#pragma unroll
          for (uint32_t e = 0; e < 4; ++e) {
            const uint32_t p = p0 + j * 8 + 2 * tig + (e & 1), r = e >> 1;
            if (p < first_r[r] || p > pos_r[r]) s[j][e] = -INFINITY;
          }
      }
      // The online softmax, per row: the new maximum over the quad of lanes sharing the row.
#pragma unroll
      for (uint32_t r = 0; r < 2; ++r) {
        float mx = m[r];
#pragma unroll
        for (uint32_t j = 0; j < N / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == -INFINITY ? 0.0f : mx;  // nothing seen yet: every weight 0, no inf - inf
        const float corr = exp2_approx((m[r] - base) * kLog2e);  // 0 the first time (m = -inf)
        m[r] = mx;
        l[r] *= corr;
#pragma unroll
        for (uint32_t j = 0; j < D / 8; ++j) o[j][2 * r] *= corr, o[j][2 * r + 1] *= corr;
        const float mb = base * kLog2e;
#pragma unroll
        for (uint32_t j = 0; j < N / 8; ++j) {
          s[j][2 * r] = exp2_approx(fmaf(s[j][2 * r], kLog2e, -mb));
          s[j][2 * r + 1] = exp2_approx(fmaf(s[j][2 * r + 1], kLog2e, -mb));
        }
      }
      // P V: P's A fragment of positions 16 kk .. + 15 is S's C fragments of n-tiles 2 kk and 2 kk + 1.
#pragma unroll
      for (uint32_t kk = 0; kk < N / 16; ++kk) {
        const uint32_t a[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1], l[0]), pack_half2(s[2 * kk][2], s[2 * kk][3], l[1]),
                               pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1], l[0]),
                               pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3], l[1])};
#pragma unroll
        for (uint32_t dd = 0; dd < D / 16; ++dd) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vt + v_row + kk * 16 * S + dd * 16);
          mma_16816(o[2 * dd], a, b[0], b[1]);
          mma_16816(o[2 * dd + 1], a, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // this buffer is read before the next step's load overwrites it
  }

  const float sink = sinks ? sinks[h] : -INFINITY;
#pragma unroll
  for (uint32_t r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const uint32_t row = r0 + g + 8 * r;
    if (row >= tq) continue;  // every real row saw its own position: m finite, l >= 1
    const float mf = with_sink_max(m[r], sink), corr = expf(m[r] - mf);
    const float f = corr / with_sink_sum(l[r] * corr, sink, mf);
    float* orow = out + (uint64_t(t0 + row) * heads + h) * D + 2 * tig;
#pragma unroll
    for (uint32_t j = 0; j < D / 8; ++j) *reinterpret_cast<float2*>(orow + 8 * j) = make_float2(o[j][2 * r] * f, o[j][2 * r + 1] * f);
  }
}

template <uint32_t D>
void launch(cudaStream_t s, const float* q, const __half* kc, const __half* vc, uint32_t kv_dim, uint32_t heads, uint32_t group,
            uint32_t window, uint32_t pos0, uint32_t n, float scale, const float* sinks, float* out) {
  constexpr uint32_t bytes = Tiles<D>::kSharedBytes;
  opt_in_shared<flash_mma_kernel<D>>(bytes, "cudaFuncSetAttribute (the tensor-core flash attention's shared memory)");
  flash_mma_kernel<D><<<dim3(heads, (n + kBlockM - 1) / kBlockM), kWarps * 32, bytes, s>>>(q, kc, vc, kv_dim, group, window,
                                                                                         pos0, n, scale, sinks, out);
}

}  // namespace

bool flash_mma_takes(uint32_t head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

void flash_attention_mma(cudaStream_t s, const float* q, const __half* kc, const __half* vc, uint32_t kv_dim,
                         uint32_t head_dim, uint32_t heads, uint32_t group, uint32_t window, uint32_t pos0, uint32_t n,
                         float scale, const float* sinks, float* out) {
  switch (head_dim) {
    case 64: return launch<64>(s, q, kc, vc, kv_dim, heads, group, window, pos0, n, scale, sinks, out);
    case 128: return launch<128>(s, q, kc, vc, kv_dim, heads, group, window, pos0, n, scale, sinks, out);
    case 256: return launch<256>(s, q, kc, vc, kv_dim, heads, group, window, pos0, n, scale, sinks, out);
    default: throw std::logic_error("flash_attention_mma: heads of 64, 128 or 256 dimensions only");
  }
}

}  // namespace gpunvme::llm::gpu
