// The engine's batched matrix kernel (examples/llm/compute/gpu_matmul.h) on the GPU: for every weight
// type, batch sizes across the kernel's token tile, rows that do not fill a block, wide rows (up to
// Llama-3-70B's 28672-wide FFN row) and a stacked expert matrix chosen by a device-side id, every (row, token) result must
// have the bits of the single-token matrix-vector kernel (so a batched pass gives the logits of
// single-token passes), and be the CPU's dot product up to float rounding.
// The decode fusions (issue 36: Q, K and V in one launch, gate and up with the GLU in the epilogue, the
// input norms in the products' launches, the residual adds in the O and down projections' epilogues)
// must keep the bits of the launches they replace.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/generators/catch_generators_range.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "examples/llm/compute/gpu_forward.h"
#include "examples/llm/compute/gpu_matmul.h"
#include "examples/llm/compute/q8_scope.h"
#include "examples/llm/compute/ops.h"
#include "examples/llm/quant/weight_types.h"
#include "device_array.h"
#include "gpu_rig.h"
#include "tests/llm/tiny_model.h"

using namespace gpunvme;
using namespace gpunvme::llm;
using Catch::Generators::from_range;

namespace {

using gpunvme::test::DeviceArray;

// Every weight type the kernels decode.
// Every type of the weight-type table (a new row is tested without an edit here).
const std::vector<GgmlType> kTypes(kComputedTypes.begin(), kComputedTypes.end());

// These cases hold the FP32 kernels to each other and to the CPU: the 8-bit path (on by default for some
// types, gpu_matmul.h) off for their scope (`fp32`). Its own bits: test_llm_matvec_q8.cpp,
// test_llm_matmul_q8_batch.cpp.

}  // namespace

TEST_CASE("batched matrix kernel: the matrix-vector kernel's bits for every token", "[gpu][llm]") {
  REQUIRE_GPU();
  const ScopedQ8Types fp32(0);
  const GgmlType t = GENERATE(from_range(kTypes));
  struct Shape { uint32_t rows, cols, n, mats; };
  const Shape sh = GENERATE(Shape{37, 512, 1, 1}, Shape{37, 512, 7, 1}, Shape{37, 512, 9, 1}, Shape{64, 256, 33, 1},
                            Shape{19, 8192, 5, 1}, Shape{9, 28672, 17, 1}, Shape{21, 768, 12, 3});
  CAPTURE(gguf::ggml_type_name(uint32_t(t)), sh.rows, sh.cols, sh.n, sh.mats);
  std::mt19937 rng(uint32_t(t) * 7 + sh.n);
  const auto w = llm::test::random_rows(t, sh.cols, uint64_t(sh.rows) * sh.mats, rng);
  std::vector<float> x(size_t(sh.n) * sh.cols), bias(sh.rows);
  std::normal_distribution<float> d;
  for (float& v : x) v = d(rng);
  for (float& v : bias) v = d(rng);
  const uint32_t pick = sh.mats - 1;  // the last matrix of the stack
  DeviceArray<uint8_t> dw(w);
  DeviceArray<float> dx(x), db(bias), dy(std::vector<float>(size_t(sh.n) * sh.rows, NAN)),
      dref(std::vector<float>(size_t(sh.n) * sh.rows, NAN));
  DeviceArray<uint32_t> dsel(std::vector<uint32_t>{pick});
  const uint64_t row_bytes = w.size() / (uint64_t(sh.rows) * sh.mats);
  const GpuMatrix m{t, dw.p, row_bytes, sh.rows, sh.cols, sh.mats > 1 ? dsel.p : nullptr, row_bytes * sh.rows};
  gpu_matmul_batched(nullptr, m, dx.p, sh.n, db.p, dy.p);
  for (uint32_t k = 0; k < sh.n; ++k) gpu_matmul(nullptr, m, dx.p + size_t(k) * sh.cols, 1, db.p, dref.p + size_t(k) * sh.rows);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto y = dy.get(size_t(sh.n) * sh.rows), ref = dref.get(size_t(sh.n) * sh.rows);
  REQUIRE(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)) == 0);
  for (uint32_t k = 0; k < sh.n; ++k)
    for (uint32_t r = 0; r < sh.rows; ++r) {
      const uint8_t* row = w.data() + (uint64_t(pick) * sh.rows + r) * row_bytes;
      const float cpu = dot_row(t, row, sh.cols, &x[size_t(k) * sh.cols]) + bias[r];
      // The GPU adds the 32-element group sums in another order (lanes, then a butterfly).
      float mag = std::fabs(bias[r]), g[kGroup];
      for (uint32_t grp = 0; grp < sh.cols / kGroup; ++grp) {
        dequant_group(t, row, grp, g);
        for (int l = 0; l < kGroup; ++l) mag += std::fabs(g[l] * x[size_t(k) * sh.cols + grp * kGroup + l]);
      }
      CAPTURE(k, r, cpu, y[size_t(k) * sh.rows + r]);
      REQUIRE(std::fabs(y[size_t(k) * sh.rows + r] - cpu) <= 1e-5f * mag + 1e-6f);
    }
}

// Every pass size of the small-token path (1..32 tokens) through the batched kernel against one
// matrix-vector product per token, bit for bit, for every type, on rows whose bytes the matrix-vector
// kernel stages in shared memory where the type allows (2048 columns: a multiple of 16 bytes for every
// type, Q6_K's 210-byte super-blocks included) and on rows it reads directly (768 columns: Q6_K's and
// MXFP4's rows are not whole 16-byte units), 45 rows (a block's rows left over) of the second matrix of a
// stack picked by a device-side id. The unstaged kernel must agree too.
TEST_CASE("matrix kernels: every pass of 1..32 tokens has the single-token bits", "[gpu][llm]") {
  REQUIRE_GPU();
  const ScopedQ8Types fp32(0);
  const GgmlType t = GENERATE(from_range(kTypes));
  const uint32_t cols = GENERATE(2048u, 768u);
  const uint32_t rows = 45, mats = 2, n_max = 32;
  CAPTURE(gguf::ggml_type_name(uint32_t(t)), cols);
  std::mt19937 rng(uint32_t(t) * 13 + cols);
  const auto w = llm::test::random_rows(t, cols, uint64_t(rows) * mats, rng);
  std::vector<float> x(size_t(n_max) * cols);
  std::normal_distribution<float> d;
  for (float& v : x) v = d(rng);
  DeviceArray<uint8_t> dw(w);
  DeviceArray<float> dx(x), dy(std::vector<float>(size_t(n_max) * rows, NAN)), dref(std::vector<float>(size_t(n_max) * rows, NAN)),
      dun(std::vector<float>(size_t(n_max) * rows, NAN));
  DeviceArray<uint32_t> dsel(std::vector<uint32_t>{1});
  const uint64_t row_bytes = w.size() / (uint64_t(rows) * mats);
  const GpuMatrix m{t, dw.p, row_bytes, rows, cols, dsel.p, row_bytes * rows};
  GpuMatrix second = m;  // the same matrix by address, for the unstaged kernel (it takes no id)
  second.sel = nullptr;
  second.w = dw.p + m.mat_bytes;
  for (uint32_t k = 0; k < n_max; ++k) {
    gpu_matmul(nullptr, m, dx.p + size_t(k) * cols, 1, nullptr, dref.p + size_t(k) * rows);
    gpu_matvec_unstaged(nullptr, second, dx.p + size_t(k) * cols, nullptr, dun.p + size_t(k) * rows);
  }
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto ref = dref.get(size_t(n_max) * rows), un = dun.get(size_t(n_max) * rows);
  for (float v : ref) REQUIRE(!std::isnan(v));
  REQUIRE(std::memcmp(ref.data(), un.data(), ref.size() * sizeof(float)) == 0);
  for (uint32_t n = 1; n <= n_max; ++n) {
    CAPTURE(n);
    gpu_matmul(nullptr, m, dx.p, n, nullptr, dy.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    const auto y = dy.get(size_t(n) * rows);
    REQUIRE(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)) == 0);
  }
}

// The staged matrix-vector kernel (x in shared memory, one or two rows per warp, blocks striding over
// rows, and the rows' bytes staged in shared memory where they are 16-byte aligned) against the
// warp-per-row kernel that reads x and the weights from global memory: the same bits for every type, for
// short matrices (one row per warp), tall ones whose last block is partly idle (two rows per warp), rows
// whose bytes are staged (2048 and 4096 columns: whole 16-byte units for every type; 28672: Llama-3-70B's
// FFN row) and rows that are not (256 columns: Q6_K's 210 bytes; a matrix 2 bytes off 16-byte alignment),
// rows too wide to stage x for (the fallback), and k selected matrices of a stack in one launch.
TEST_CASE("staged matrix-vector kernel: the warp-per-row kernel's bits", "[gpu][llm]") {
  REQUIRE_GPU();
  const ScopedQ8Types fp32(0);
  const GgmlType t = GENERATE(from_range(kTypes));
  struct Shape { uint32_t rows, cols, mats, count, offset; };
  const Shape sh = GENERATE(Shape{37, 512, 1, 1, 0}, Shape{4501, 256, 1, 1, 0}, Shape{700, 1024, 4, 3, 0},
                            Shape{300, 2048, 1, 1, 0}, Shape{1030, 4096, 3, 2, 0}, Shape{300, 2048, 1, 1, 2},
                            Shape{90, 4096, 3, 2, 2}, Shape{3, 28672, 1, 1, 0}, Shape{2, 65536, 1, 1, 0});
  CAPTURE(gguf::ggml_type_name(uint32_t(t)), sh.rows, sh.cols, sh.mats, sh.count, sh.offset);
  std::mt19937 rng(uint32_t(t) * 11 + sh.rows);
  auto w = llm::test::random_rows(t, sh.cols, uint64_t(sh.rows) * sh.mats, rng);
  const uint64_t row_bytes = w.size() / (uint64_t(sh.rows) * sh.mats);
  w.insert(w.begin(), sh.offset, uint8_t(0x5A));  // the matrix at dw.p + offset
  std::vector<float> x(size_t(sh.count) * sh.cols);
  std::normal_distribution<float> d;
  for (float& v : x) v = d(rng);
  std::vector<uint32_t> sel(sh.count);
  for (uint32_t j = 0; j < sh.count; ++j) sel[j] = (sh.mats - 1 + 2 * j) % sh.mats;  // out of order, repeats allowed
  DeviceArray<uint8_t> dw(w);
  DeviceArray<float> dx(x), dy(std::vector<float>(size_t(sh.count) * sh.rows, NAN)),
      dref(std::vector<float>(size_t(sh.count) * sh.rows, NAN));
  DeviceArray<uint32_t> dsel(sel);
  const uint8_t* w0 = dw.p + sh.offset;
  GpuMatrix m{t, w0, row_bytes, sh.rows, sh.cols, sh.mats > 1 ? dsel.p : nullptr, row_bytes * sh.rows};
  if (sh.count == 1) gpu_matmul(nullptr, m, dx.p, 1, nullptr, dy.p);
  else gpu_matvec_selected(nullptr, m, sh.count, dx.p, sh.cols, dy.p, sh.rows);
  for (uint32_t j = 0; j < sh.count; ++j) {
    GpuMatrix one = m;
    one.sel = nullptr;
    one.w = w0 + uint64_t(sel[j]) * m.mat_bytes;
    gpu_matvec_unstaged(nullptr, one, dx.p + size_t(j) * sh.cols, nullptr, dref.p + size_t(j) * sh.rows);
  }
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto y = dy.get(size_t(sh.count) * sh.rows), ref = dref.get(size_t(sh.count) * sh.rows);
  for (float v : ref) REQUIRE(!std::isnan(v));  // every row was written
  REQUIRE(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)) == 0);
}

// The GPU's dequantization (byte permutes and the exponent trick, wide loads) against the host's, weight
// for weight: with a one-hot x the matrix-vector kernel returns column j's weights exactly (every other
// product is 0 * x), so each must equal dequant_group's value on the CPU.
TEST_CASE("matrix-vector kernel: the GPU dequantizes every weight to the CPU's value", "[gpu][llm]") {
  REQUIRE_GPU();
  const ScopedQ8Types fp32(0);
  const GgmlType t = GENERATE(from_range(kTypes));
  CAPTURE(gguf::ggml_type_name(uint32_t(t)));
  const uint32_t rows = 300, cols = 512;  // two K-quant super-blocks a row: every sub-block position
  std::mt19937 rng(uint32_t(t) + 99);
  const auto w = llm::test::random_rows(t, cols, rows, rng);
  const uint64_t row_bytes = w.size() / rows;
  DeviceArray<uint8_t> dw(w);
  DeviceArray<float> dy(std::vector<float>(rows, NAN));
  const GpuMatrix m{t, dw.p, row_bytes, rows, cols, nullptr, 0};
  for (uint32_t j = 0; j < cols; j += 7) {
    std::vector<float> x(cols, 0.0f);
    x[j] = 1.0f;
    DeviceArray<float> dx(x);
    gpu_matmul(nullptr, m, dx.p, 1, nullptr, dy.p);
    const auto y = dy.get(rows);
    for (uint32_t r = 0; r < rows; ++r) {
      float g[kGroup];
      dequant_group(t, w.data() + r * row_bytes, j / kGroup, g);
      CAPTURE(j, r, g[j % kGroup], y[r]);
      REQUIRE(y[r] == g[j % kGroup]);
    }
  }
}

// MXFP4 (gpt-oss's experts) from values written out by hand, not from dequant.h: ggml's kvalues_mxfp4
// (the doubled E2M1 values) times 2^(e - 128). Three rows of two blocks; row r's block b has scale byte
// kE[r][b] and codes qs[j] = j | (15 - j) << 4, so elements 0..15 are codes 0..15 and 16..31 codes 15..0.
// Row 2's scale bytes 0 and 1 are E8M0's subnormal halves 2^-128 and 2^-127: a kernel built with
// flush-to-zero would return 0 for them. A one-hot x reads every weight back through the matrix-vector
// kernel (and the batched one), which must equal the CPU's dot product, all exactly.
TEST_CASE("MXFP4: hand-made blocks through the GPU matrix kernels give ggml's values", "[gpu][llm]") {
  REQUIRE_GPU();
  const ScopedQ8Types fp32(0);
  const float kKvalues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const uint8_t kE[3][2] = {{128, 126}, {130, 127}, {0, 1}};
  const float kScale[3][2] = {{1.0f, 0.25f}, {4.0f, 0.5f}, {std::ldexp(1.0f, -128), std::ldexp(1.0f, -127)}};
  const uint32_t rows = 3, cols = 64, row_bytes = 2 * 17;
  std::vector<uint8_t> w(rows * row_bytes);
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t b = 0; b < 2; ++b) {
      uint8_t* block = &w[r * row_bytes + b * 17];
      block[0] = kE[r][b];
      for (uint32_t j = 0; j < 16; ++j) block[1 + j] = uint8_t(j | (15 - j) << 4);
    }
  auto expected = [&](uint32_t r, uint32_t c) {
    const uint32_t j = c % 32;
    return kKvalues[j < 16 ? j : 31 - j] * kScale[r][c / 32];
  };
  REQUIRE(expected(2, 7) > 0.0f);  // 12 * 2^-128: representable, not flushed on the host
  DeviceArray<uint8_t> dw(w);
  DeviceArray<float> dy(std::vector<float>(rows, NAN)), dyb(std::vector<float>(2 * rows, NAN));
  const GpuMatrix m{GgmlType::MXFP4, dw.p, row_bytes, rows, cols, nullptr, 0};
  for (uint32_t c = 0; c < cols; ++c) {
    std::vector<float> x(2 * cols, 0.0f);
    x[c] = 1.0f;             // token 0: column c
    x[cols + cols - 1 - c] = 1.0f;  // token 1 (batched kernel): the mirrored column
    DeviceArray<float> dx(x);
    gpu_matmul(nullptr, m, dx.p, 1, nullptr, dy.p);
    gpu_matmul_batched(nullptr, m, dx.p, 2, nullptr, dyb.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    const auto y = dy.get(rows), yb = dyb.get(2 * rows);
    for (uint32_t r = 0; r < rows; ++r) {
      CAPTURE(c, r, expected(r, c), y[r], yb[r], yb[rows + r]);
      REQUIRE(y[r] == expected(r, c));
      REQUIRE(yb[r] == expected(r, c));
      REQUIRE(yb[rows + r] == expected(r, cols - 1 - c));
      REQUIRE(dot_row(GgmlType::MXFP4, &w[r * row_bytes], cols, x.data()) == expected(r, c));  // the CPU's
    }
  }
}

// The fused products of a decode layer (issue 36): Q, K and V in one launch (gpu_matvecs: their rows
// together, a warp's two rows possibly of two matrices) must give each output the bits of its own
// gpu_matmul launch, for every type, with and without biases, for short sets (one row a warp) and tall
// ones (Llama-3-8B's 4096 + 1024 + 1024 rows), for rows staged in shared memory and rows read directly (V
// 2 bytes off 16-byte alignment: then no row of the set is staged), for a V of another type (two launches)
// and for rows too wide to stage x for (one launch each).
TEST_CASE("fused Q, K and V products: each output has its own launch's bits", "[gpu][llm]") {
  REQUIRE_GPU();
  const ScopedQ8Types fp32(0);
  const GgmlType t = GENERATE(from_range(kTypes));
  struct Shape { uint32_t q_rows, kv_rows, cols, v_offset; bool v_other_type; };
  const Shape sh = GENERATE(Shape{64, 16, 512, 0, false}, Shape{4096, 1024, 4096, 0, false}, Shape{37, 5, 2048, 0, false},
                            Shape{300, 100, 2048, 2, false}, Shape{256, 64, 1024, 0, true}, Shape{3, 1, 65536, 0, false});
  const GgmlType vt = !sh.v_other_type ? t : t == GgmlType::Q6_K ? GgmlType::Q4_K : GgmlType::Q6_K;
  CAPTURE(gguf::ggml_type_name(uint32_t(t)), gguf::ggml_type_name(uint32_t(vt)), sh.q_rows, sh.kv_rows, sh.cols, sh.v_offset);
  std::mt19937 rng(uint32_t(t) * 17 + sh.cols + sh.q_rows);
  const auto wq = llm::test::random_rows(t, sh.cols, sh.q_rows, rng), wk = llm::test::random_rows(t, sh.cols, sh.kv_rows, rng),
             wv = llm::test::random_rows(vt, sh.cols, sh.kv_rows, rng);
  std::vector<uint8_t> w = wq;
  w.insert(w.end(), wk.begin(), wk.end());
  w.insert(w.end(), sh.v_offset, uint8_t(0x5A));
  w.insert(w.end(), wv.begin(), wv.end());
  std::vector<float> x(sh.cols), bq(sh.q_rows), bv(sh.kv_rows);
  std::normal_distribution<float> d;
  for (auto* v : {&x, &bq, &bv})
    for (float& e : *v) e = d(rng);
  DeviceArray<uint8_t> dw(w);
  DeviceArray<float> dx(x), dbq(bq), dbv(bv);
  const uint32_t rows[3] = {sh.q_rows, sh.kv_rows, sh.kv_rows};
  const uint8_t* at[3] = {dw.p, dw.p + wq.size(), dw.p + wq.size() + wk.size() + sh.v_offset};
  const uint64_t row_bytes[3] = {wq.size() / sh.q_rows, wk.size() / sh.kv_rows, wv.size() / sh.kv_rows};
  const GgmlType types[3] = {t, t, vt};
  const float* bias[3] = {dbq.p, nullptr, dbv.p};  // K without one, as in Qwen2 all three have one, Llama none
  std::vector<std::unique_ptr<DeviceArray<float>>> fused, ref;
  GpuProduct ps[3];
  for (int i = 0; i < 3; ++i) {
    fused.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(rows[i], NAN)));
    ref.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(rows[i], NAN)));
    ps[i] = {GpuMatrix{types[i], at[i], row_bytes[i], rows[i], sh.cols, nullptr, 0}, bias[i], fused[i]->p};
    gpu_matmul(nullptr, ps[i].m, dx.p, 1, bias[i], ref[i]->p);
  }
  gpu_matvecs(nullptr, ps, dx.p);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    const auto y = fused[i]->get(rows[i]), r = ref[i]->get(rows[i]);
    for (float v : r) REQUIRE(!std::isnan(v));
    REQUIRE(std::memcmp(y.data(), r.data(), y.size() * sizeof(float)) == 0);
  }
}

// A gated FFN's gate and up products with the GLU in the kernel's epilogue (gpu_matvec_glu) against the
// two products (gpu_matmul) and the element-wise GLU kernel (gpu_glu): the same bits, for every type and
// activation (gpt-oss's clamped SwiGLU on inputs scaled across its limit), short and tall matrices, rows
// staged and not (768 columns: Q6_K's rows are not whole 16-byte units). Refused (false, nothing written)
// for two types, two shapes, or rows too wide to stage x for.
TEST_CASE("fused gate, up and GLU: the products' and the GLU kernel's bits", "[gpu][llm]") {
  REQUIRE_GPU();
  const ScopedQ8Types fp32(0);
  const GgmlType t = GENERATE(from_range(kTypes));
  const FfnAct act = GENERATE(FfnAct::kSilu, FfnAct::kGelu, FfnAct::kSwigluOai);
  struct Shape { uint32_t rows, cols; };
  const Shape sh = GENERATE(Shape{37, 2048}, Shape{2000, 1024}, Shape{5, 768}, Shape{1500, 4096});
  CAPTURE(gguf::ggml_type_name(uint32_t(t)), int(act), sh.rows, sh.cols);
  std::mt19937 rng(uint32_t(t) * 23 + sh.rows + uint32_t(act));
  const auto wg = llm::test::random_rows(t, sh.cols, sh.rows, rng), wu = llm::test::random_rows(t, sh.cols, sh.rows, rng);
  std::vector<float> x(sh.cols);
  std::normal_distribution<float> d(0.0f, act == FfnAct::kSwigluOai ? 6.0f : 1.0f);
  for (float& e : x) e = d(rng);
  DeviceArray<uint8_t> dg(wg), du(wu);
  DeviceArray<float> dx(x), dy(std::vector<float>(sh.rows, NAN)), dref(std::vector<float>(sh.rows, NAN)),
      dup(std::vector<float>(sh.rows, NAN));
  const GpuMatrix gate{t, dg.p, wg.size() / sh.rows, sh.rows, sh.cols, nullptr, 0};
  GpuMatrix up = gate;
  up.w = du.p;
  gpu_matmul(nullptr, gate, dx.p, 1, nullptr, dref.p);
  gpu_matmul(nullptr, up, dx.p, 1, nullptr, dup.p);
  gpu_glu(nullptr, dref.p, dup.p, sh.rows, act);
  REQUIRE(gpu_matvec_glu(nullptr, gate, up, dx.p, act, dy.p));
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto y = dy.get(sh.rows), ref = dref.get(sh.rows);
  for (float v : ref) REQUIRE(!std::isnan(v));
  REQUIRE(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)) == 0);
  GpuMatrix other = up;
  other.type = t == GgmlType::Q8_0 ? GgmlType::Q4_0 : GgmlType::Q8_0;
  REQUIRE_FALSE(gpu_matvec_glu(nullptr, gate, other, dx.p, act, dy.p));
  other = up;
  other.rows = sh.rows - 1;
  REQUIRE_FALSE(gpu_matvec_glu(nullptr, gate, other, dx.p, act, dy.p));
}

// The GPU's RMS norm (gpu_norm.cuh: 256 threads, each adding its strided elements' squares in double,
// the warp butterfly, the warps in order; then x * scale * w in float) on the host, operation for
// operation: IEEE double and float arithmetic, sqrtf and the division correctly rounded on both sides.
std::vector<float> gpu_rms_norm_on_host(const std::vector<float>& x, const std::vector<float>& w, float eps) {
  const uint32_t threads = 256, n = uint32_t(x.size());
  std::vector<double> ss(threads, 0.0);
  for (uint32_t t = 0; t < threads; ++t)
    for (uint32_t i = t; i < n; i += threads) ss[t] += double(x[i]) * x[i];
  double total = 0.0;
  for (uint32_t warp = 0; warp < threads / 32; ++warp) {
    std::vector<double> v(ss.begin() + warp * 32, ss.begin() + warp * 32 + 32);
    for (uint32_t o = 16; o > 0; o >>= 1) {
      std::vector<double> next(32);
      for (uint32_t l = 0; l < 32; ++l) next[l] = v[l] + v[l ^ o];
      v = next;
    }
    total += v[0];
  }
  const float scale = 1.0f / std::sqrt(float(total / n) + eps);
  std::vector<float> out(n);
  for (uint32_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
  return out;
}

// A layer's input norm and its Q, K and V in one launch (gpu_matvecs_normed: each block normalizes the
// x it stages), and the FFN's norm in the gate/up/GLU launch, against the products of the normed vector
// (the norm on the host, as the GPU computes it), bit for bit, at real widths, staged rows and direct
// ones; refused for two types and for norm weights in host memory.
TEST_CASE("norm in the Q/K/V and gate/up launches: the products of the normed vector, bit for bit", "[gpu][llm]") {
  REQUIRE_GPU();
  const ScopedQ8Types fp32(0);
  const GgmlType t = GENERATE(from_range(kTypes));
  const uint32_t cols = GENERATE(4096u, 2048u, 768u);
  const uint32_t q_rows = 512, kv_rows = 128;
  CAPTURE(gguf::ggml_type_name(uint32_t(t)), cols);
  std::mt19937 rng(uint32_t(t) * 31 + cols);
  std::vector<uint8_t> w = llm::test::random_rows(t, cols, q_rows + 2 * kv_rows, rng);
  const uint64_t row_bytes = w.size() / (q_rows + 2 * kv_rows);
  std::vector<float> x(cols), nw(cols);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (float& e : x) e = d(rng);
  for (float& e : nw) e = u(rng);
  const float eps = 1e-5f;
  DeviceArray<uint8_t> dw(w);
  DeviceArray<float> dx(x), dnw(nw), dxn(gpu_rms_norm_on_host(x, nw, eps)), dy(std::vector<float>(q_rows + 2 * kv_rows, NAN)),
      dref(std::vector<float>(q_rows + 2 * kv_rows, NAN));
  const uint32_t rows[3] = {q_rows, kv_rows, kv_rows}, first[3] = {0, q_rows, q_rows + kv_rows};
  GpuProduct ps[3], ref[3];
  for (int i = 0; i < 3; ++i) {
    const GpuMatrix m{t, dw.p + first[i] * row_bytes, row_bytes, rows[i], cols, nullptr, 0};
    ps[i] = {m, nullptr, dy.p + first[i]};
    ref[i] = {m, nullptr, dref.p + first[i]};
  }
  REQUIRE(gpu_matvecs_normed(nullptr, ps, dx.p, dnw.p, eps));
  gpu_matvecs(nullptr, ref, dxn.p);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto y = dy.get(q_rows + 2 * kv_rows), r = dref.get(q_rows + 2 * kv_rows);
  for (float v : r) REQUIRE(!std::isnan(v));
  REQUIRE(std::memcmp(y.data(), r.data(), y.size() * sizeof(float)) == 0);
  // The FFN's norm in the gate/up/GLU launch: rows 0 .. 127 as gate, 128 .. 255 as up.
  GpuMatrix gate{t, dw.p, row_bytes, 128, cols, nullptr, 0}, up = gate;
  up.w = dw.p + 128 * row_bytes;
  DeviceArray<float> dg(std::vector<float>(128, NAN)), dgr(std::vector<float>(128, NAN));
  REQUIRE(gpu_matvec_glu(nullptr, gate, up, dx.p, FfnAct::kSilu, dg.p, dnw.p, eps));
  REQUIRE(gpu_matvec_glu(nullptr, gate, up, dxn.p, FfnAct::kSilu, dgr.p));
  const auto g = dg.get(128), gr = dgr.get(128);
  for (float v : gr) REQUIRE(!std::isnan(v));
  REQUIRE(std::memcmp(g.data(), gr.data(), g.size() * sizeof(float)) == 0);
  // Norm weights in host memory (a streamed slot's): refused, each block would read them over the link.
  float* host_nw = nullptr;
  REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&host_nw), cols * sizeof(float), cudaHostAllocMapped) == cudaSuccess);
  std::copy(nw.begin(), nw.end(), host_nw);
  float* mapped_nw = nullptr;
  REQUIRE(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mapped_nw), host_nw, 0) == cudaSuccess);
  CHECK_FALSE(gpu_matvecs_normed(nullptr, ps, dx.p, mapped_nw, eps));
  CHECK_FALSE(gpu_matvec_glu(nullptr, gate, up, dx.p, FfnAct::kSilu, dg.p, mapped_nw, eps));
  cudaFreeHost(host_nw);
  ps[2].m.type = t == GgmlType::Q8_0 ? GgmlType::Q4_0 : GgmlType::Q8_0;
  REQUIRE_FALSE(gpu_matvecs_normed(nullptr, ps, dx.p, dnw.p, eps));
}

// The down projection with the residual add in its epilogue (gpu_matvec_add): y + (the product), the
// float sum the add kernel forms from gpu_matmul's output (IEEE addition: the host's sum is the GPU's),
// for every type, with and without a bias, staged rows and direct ones.
TEST_CASE("product with the residual add in its epilogue: the product's and the add's bits", "[gpu][llm]") {
  REQUIRE_GPU();
  const ScopedQ8Types fp32(0);
  const GgmlType t = GENERATE(from_range(kTypes));
  struct Shape { uint32_t rows, cols; bool bias; };
  const Shape sh = GENERATE(Shape{4096, 1024, false}, Shape{37, 2048, true}, Shape{640, 768, false});
  CAPTURE(gguf::ggml_type_name(uint32_t(t)), sh.rows, sh.cols, sh.bias);
  std::mt19937 rng(uint32_t(t) * 29 + sh.rows);
  const auto w = llm::test::random_rows(t, sh.cols, sh.rows, rng);
  std::vector<float> x(sh.cols), y0(sh.rows), bias(sh.rows);
  std::normal_distribution<float> d;
  for (auto* v : {&x, &y0, &bias})
    for (float& e : *v) e = d(rng);
  DeviceArray<uint8_t> dw(w);
  DeviceArray<float> dx(x), dy(y0), db(bias), dref(std::vector<float>(sh.rows, NAN));
  const GpuMatrix m{t, dw.p, w.size() / sh.rows, sh.rows, sh.cols, nullptr, 0};
  const float* b = sh.bias ? db.p : nullptr;
  gpu_matmul(nullptr, m, dx.p, 1, b, dref.p);
  REQUIRE(gpu_matvec_add(nullptr, m, dx.p, b, dy.p));
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto y = dy.get(sh.rows), ref = dref.get(sh.rows);
  std::vector<float> expect(sh.rows);
  for (uint32_t r = 0; r < sh.rows; ++r) expect[r] = y0[r] + ref[r];
  for (float v : ref) REQUIRE(!std::isnan(v));
  REQUIRE(std::memcmp(y.data(), expect.data(), y.size() * sizeof(float)) == 0);
}

TEST_CASE("fused gate, up and GLU: refused for rows too wide to stage x for", "[gpu][llm]") {
  REQUIRE_GPU();
  const ScopedQ8Types fp32(0);
  const uint32_t cols = 1u << 17, rows = 2;  // x: 512 KiB, beyond any block's shared memory
  std::mt19937 rng(5);
  const auto w = llm::test::random_rows(GgmlType::Q8_0, cols, rows, rng);
  DeviceArray<uint8_t> dw(w);
  DeviceArray<float> dx(std::vector<float>(cols, 1.0f)), dy(std::vector<float>(rows, NAN));
  const GpuMatrix m{GgmlType::Q8_0, dw.p, w.size() / rows, rows, cols, nullptr, 0};
  REQUIRE_FALSE(gpu_matvec_glu(nullptr, m, m, dx.p, FfnAct::kSilu, dy.p));
  for (float v : dy.get(rows)) REQUIRE(std::isnan(v));
}

// The GPU backend's fusions (block.h's matmuls, norm_matmuls, gated_matmul, norm_gated_matmul and
// matmul_add, which run_block calls) against the operations each stands for (Backend's defaults, on the same object and activations),
// bit for bit, on tiny models with and without Q/K/V biases and with GELU: a block gives the bits it gave
// before the fusions, and a pass of several tokens (unfused) still gives single-token passes' (fused) bits.
TEST_CASE("GPU backend fusions: (norm+)Q/K/V, (norm+)gate/up/GLU, O+add and down+add have the unfused operations' bits", "[gpu][llm]") {
  REQUIRE_GPU();
  using llm::test::Shape;
  const GgmlType type = GENERATE(GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K);
  const Shape shape = GENERATE(Shape::kLlama, Shape::kQwen2, Shape::kGemma3);
  CAPTURE(gguf::ggml_type_name(uint32_t(type)), int(shape));
  const llm::test::TinyModel m = llm::test::make_tiny(shape, type);
  DeviceArray<uint8_t> d(m.bytes);
  const PackedRanges whole = PackedRanges::span(0, m.bytes.size());
  auto at = [&](const TensorRef& t) { return d.p + t.file_offset; };
  GpuForward gpu(m.c, m.w, 32, GlobalWeights{at(m.w.token_embd), at(m.w.output_norm), at(m.w.output)}, nullptr, 8);
  gpu.use_layer(WeightView{d.p, &whole});
  const LayerWeights& l = m.w.layers[1];
  std::mt19937 rng(uint32_t(type) + 3 * uint32_t(shape));
  auto random = [&](Act a, uint32_t n) {
    std::normal_distribution<float> nd;
    std::vector<float> v(size_t(n) * act_width(m.c, a));
    for (float& e : v) e = nd(rng);
    gpu.write(a, v);
    return v;
  };
  auto poison = [&](Act a, uint32_t n) { gpu.write(a, std::vector<float>(size_t(n) * act_width(m.c, a), NAN)); };
  auto same = [&](const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    for (float v : b) REQUIRE(!std::isnan(v));
    REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  };
  for (uint32_t n : {1u, 5u}) {
    CAPTURE(n);
    gpu.set_pass(0, n);
    random(Act::kXn, n);
    const Backend::Product qkv[] = {{l.wq, l.bq, Act::kQ}, {l.wk, l.bk, Act::kK}, {l.wv, l.bv, Act::kV}};
    for (Act a : {Act::kQ, Act::kK, Act::kV}) poison(a, n);
    gpu.matmuls(qkv, Act::kXn);
    const auto q = gpu.read(Act::kQ), k = gpu.read(Act::kK), v = gpu.read(Act::kV);
    for (Act a : {Act::kQ, Act::kK, Act::kV}) poison(a, n);
    gpu.Backend::matmuls(qkv, Act::kXn);
    same(q, gpu.read(Act::kQ));
    same(k, gpu.read(Act::kK));
    same(v, gpu.read(Act::kV));

    random(Act::kX, n);  // the layer's input norm in the Q/K/V launch
    for (Act a : {Act::kQ, Act::kK, Act::kV}) poison(a, n);
    gpu.norm_matmuls(l.attn_norm, Act::kX, qkv);
    const auto nq = gpu.read(Act::kQ), nk = gpu.read(Act::kK), nv = gpu.read(Act::kV);
    for (Act a : {Act::kQ, Act::kK, Act::kV}) poison(a, n);
    gpu.Backend::norm_matmuls(l.attn_norm, Act::kX, qkv);
    same(nq, gpu.read(Act::kQ));
    same(nk, gpu.read(Act::kK));
    same(nv, gpu.read(Act::kV));

    poison(Act::kGate, n);
    gpu.gated_matmul(l.gate, l.up, Act::kXn, m.c.act);
    const auto g = gpu.read(Act::kGate);
    poison(Act::kGate, n);
    gpu.Backend::gated_matmul(l.gate, l.up, Act::kXn, m.c.act);
    same(g, gpu.read(Act::kGate));

    random(Act::kX, n);  // the FFN's norm in the gate/up/GLU launch
    poison(Act::kGate, n);
    gpu.norm_gated_matmul(l.ffn_norm, Act::kX, l.gate, l.up, m.c.act);
    const auto ng = gpu.read(Act::kGate);
    poison(Act::kGate, n);
    gpu.Backend::norm_gated_matmul(l.ffn_norm, Act::kX, l.gate, l.up, m.c.act);
    same(ng, gpu.read(Act::kGate));

    const auto x0 = random(Act::kX, n);  // the residual add in the O projection's epilogue (its bias where present)
    random(Act::kAtt, n);
    gpu.matmul_add(l.wo, l.bo, Act::kAtt, Act::kX);
    const auto xo = gpu.read(Act::kX);
    gpu.write(Act::kX, x0);
    gpu.Backend::matmul_add(l.wo, l.bo, Act::kAtt, Act::kX);
    same(xo, gpu.read(Act::kX));

    random(Act::kGate, n);  // and in the down projection's
    gpu.write(Act::kX, x0);
    gpu.matmul_add(l.down, {}, Act::kGate, Act::kX);
    const auto xd = gpu.read(Act::kX);
    gpu.write(Act::kX, x0);
    gpu.Backend::matmul_add(l.down, {}, Act::kGate, Act::kX);
    same(xd, gpu.read(Act::kX));
  }
}

namespace {
void put(DeviceArray<float>& d, const std::vector<float>& v) {
  REQUIRE(cudaMemcpy(d.p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
}

// The fused entry's result has the reference's bits (and no NaN: every row was written).
void require_same_bits(const std::vector<float>& got, const std::vector<float>& ref) {
  for (float v : ref) REQUIRE(!std::isnan(v));
  REQUIRE(got.size() == ref.size());
  REQUIRE(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0);
}
}  // namespace

// Every single-token entry (gpu_rows_lean.cuh's loops and the launch geometry, issue 36) against the
// warp-per-row kernel (gpu_matvec_unstaged: x from global memory, warp_dot_row's order) and the element
// kernels it replaces, bit for bit: one matrix, two of a stack, Q/K/V together (plain and normed: the norm
// on the host as the GPU computes it), gate/up/GLU (plain and normed: the GLU kernel), and the residual add
// (the float sum on the host); for every type, at row counts that leave a block's warps partly idle or one
// row over (1, 37, 4097: two rows a warp and an odd last row), widths whose groups do not fill the lanes'
// last pass (256: 8 groups, lanes 8..31 idle; 1280: 40 groups, lanes 0..7 take two; 14336: Llama-3-8B's
// down row) and rows that are not 16-byte aligned (2 bytes off: gpu_rows.cuh's loops instead of the lean ones).
TEST_CASE("single-token entries at odd shapes and alignments: the warp-per-row kernel's bits", "[gpu][llm]") {
  REQUIRE_GPU();
  const ScopedQ8Types fp32(0);
  const GgmlType t = GENERATE(from_range(kTypes));
  struct Shape { uint32_t rows, cols, offset; };
  const Shape sh = GENERATE(Shape{1, 256, 0}, Shape{37, 1280, 0}, Shape{4097, 256, 0}, Shape{300, 4096, 0},
                            Shape{33, 14336, 0}, Shape{37, 1280, 2}, Shape{130, 4096, 2});
  CAPTURE(gguf::ggml_type_name(uint32_t(t)), sh.rows, sh.cols, sh.offset);
  std::mt19937 rng(uint32_t(t) * 37 + sh.rows + sh.cols);
  const uint32_t mats = 3;  // matrix 0: the single product; all three: a stack, Q/K/V, gate/up
  auto w = llm::test::random_rows(t, sh.cols, uint64_t(sh.rows) * mats, rng);
  const uint64_t row_bytes = w.size() / (uint64_t(sh.rows) * mats), mat = row_bytes * sh.rows;
  w.insert(w.begin(), sh.offset, uint8_t(0x5A));
  std::vector<float> x(2 * size_t(sh.cols)), nw(sh.cols), bias(sh.rows), y0(sh.rows);
  std::normal_distribution<float> d;
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (auto* v : {&x, &bias, &y0})
    for (float& e : *v) e = d(rng);
  for (float& e : nw) e = u(rng);
  const float eps = 1e-5f;
  const std::vector<float> xn = gpu_rms_norm_on_host(std::vector<float>(x.begin(), x.begin() + sh.cols), nw, eps);
  DeviceArray<uint8_t> dw(w);
  DeviceArray<float> dx(x), dxn(xn), dnw(nw), db(bias), dy(std::vector<float>(3 * size_t(sh.rows), NAN)),
      dr(std::vector<float>(3 * size_t(sh.rows), NAN));
  DeviceArray<uint32_t> dsel(std::vector<uint32_t>{2, 0});
  const uint8_t* w0 = dw.p + sh.offset;
  const GpuMatrix m{t, w0, row_bytes, sh.rows, sh.cols, nullptr, 0};
  auto at = [&](uint32_t i) { GpuMatrix r = m; r.w = w0 + i * mat; return r; };
  const size_t R = sh.rows;
  auto fresh = [&] {
    put(dy, std::vector<float>(3 * R, NAN));
    put(dr, std::vector<float>(3 * R, NAN));
  };
  auto check = [&](size_t n) {
    REQUIRE(cudaGetLastError() == cudaSuccess);
    require_same_bits(dy.get(n), dr.get(n));
  };
  SECTION("one matrix, with a bias") {
    fresh();
    gpu_matmul(nullptr, m, dx.p, 1, db.p, dy.p);
    gpu_matvec_unstaged(nullptr, m, dx.p, db.p, dr.p);
    check(R);
  }
  SECTION("two matrices of a stack") {
    fresh();
    GpuMatrix s = m;
    s.sel = dsel.p;
    s.mat_bytes = mat;
    gpu_matvec_selected(nullptr, s, 2, dx.p, sh.cols, dy.p, R);
    gpu_matvec_unstaged(nullptr, at(2), dx.p, nullptr, dr.p);
    gpu_matvec_unstaged(nullptr, at(0), dx.p + sh.cols, nullptr, dr.p + R);
    check(2 * R);
  }
  SECTION("Q, K and V in one launch, plain and normed") {
    const GpuProduct ps[3] = {{at(0), db.p, dy.p}, {at(1), nullptr, dy.p + R}, {at(2), db.p, dy.p + 2 * R}};
    auto ref = [&](const float* in) {
      gpu_matvec_unstaged(nullptr, at(0), in, db.p, dr.p);
      gpu_matvec_unstaged(nullptr, at(1), in, nullptr, dr.p + R);
      gpu_matvec_unstaged(nullptr, at(2), in, db.p, dr.p + 2 * R);
    };
    fresh();
    gpu_matvecs(nullptr, ps, dx.p);
    ref(dx.p);
    check(3 * R);
    fresh();
    if (gpu_matvecs_normed(nullptr, ps, dx.p, dnw.p, eps)) {
      ref(dxn.p);
      check(3 * R);
    }
  }
  SECTION("gate, up and the GLU, plain and normed") {
    auto ref = [&](const float* in) {  // gate into dr, up beside it, then the GLU kernel
      gpu_matvec_unstaged(nullptr, at(0), in, nullptr, dr.p);
      gpu_matvec_unstaged(nullptr, at(1), in, nullptr, dr.p + R);
      gpu_glu(nullptr, dr.p, dr.p + R, sh.rows, FfnAct::kSilu);
    };
    fresh();
    if (gpu_matvec_glu(nullptr, at(0), at(1), dx.p, FfnAct::kSilu, dy.p)) {
      ref(dx.p);
      check(R);
    }
    fresh();
    if (gpu_matvec_glu(nullptr, at(0), at(1), dx.p, FfnAct::kSilu, dy.p, dnw.p, eps)) {
      ref(dxn.p);
      check(R);
    }
  }
  SECTION("the residual add in the epilogue") {
    fresh();
    put(dy, y0);
    if (gpu_matvec_add(nullptr, m, dx.p, db.p, dy.p)) {
      gpu_matvec_unstaged(nullptr, m, dx.p, db.p, dr.p);
      REQUIRE(cudaGetLastError() == cudaSuccess);
      std::vector<float> r = dr.get(R);
      for (size_t i = 0; i < R; ++i) r[i] = y0[i] + r[i];  // the add kernel's float sum
      require_same_bits(dy.get(R), r);
    }
  }
}
