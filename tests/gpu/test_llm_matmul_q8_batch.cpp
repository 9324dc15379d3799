// The 8-bit-activation products beside the one-token kernel (gpu_rows_q8_batch.cuh, issue 36): a pass
// of 1 to 32 tokens (gpu_matmul, gpu_matmul_batched) and a stack's selected matrices (gpu_matvec_selected,
// the MoE experts' products) must give every token the bits of the one-token product of that token alone,
// and the CPU twin's (quant/q8_dot.h), for every type the 8-bit path takes, aligned and unaligned rows
// (the selected matrices: every type, aligned rows), each launch checked for a refusal.
// That is what keeps speculative decoding's output plain greedy decoding's and streamed = resident.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "examples/llm/compute/gpu_matmul.h"
#include "examples/llm/compute/q8_scope.h"
#include "examples/llm/compute/q8_types.h"  // kAllQ8Types
#include "examples/llm/quant/q8_dot.h"
#include "device_array.h"
#include "gpu_rig.h"
#include "q8_vectors.h"
#include "tests/llm/tiny_model.h"

using namespace gpunvme;
using namespace gpunvme::llm;
using gpunvme::test::DeviceArray;

namespace {

// Token k's CPU twin (one row at a time) plus the bias, as MatrixRows stores it.
std::vector<float> twin(GgmlType t, const uint8_t* w, uint64_t rb, uint32_t rows, uint32_t cols, const float* x, const float* bias) {
  const Q8Vector q = q8_quantize(x, cols);
  std::vector<float> y(rows);
  for (uint32_t r = 0; r < rows; ++r) y[r] = row_dot_q8(t, w + r * rb, cols, q) + (bias ? bias[r] : 0.0f);
  return y;
}

// A refused launch (too much shared memory, a bad grid) is reported by cudaGetLastError, not by the
// synchronize after it: without this check the comparisons would read the NaN-filled or the last
// launch's outputs and the failure would show as wrong bits, or, where both sides were refused, not at all.
void require_launched() { REQUIRE(cudaGetLastError() == cudaSuccess); }

}  // namespace

TEST_CASE("8-bit x passes of 1 to 32 tokens: each token the one-token product's and the CPU twin's bits", "[gpu][llm]") {
  REQUIRE_GPU();
  struct Shape { uint32_t rows, cols; };
  const Shape sh = GENERATE(Shape{37, 256}, Shape{1000, 4096}, Shape{300, 14336}, Shape{70, 2816});
  const GgmlType t = GENERATE(GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_K);
  const bool unaligned = GENERATE(false, true);  // rows 8 bytes past a 16-byte boundary
  CAPTURE(gguf::ggml_type_name(uint32_t(t)), sh.rows, sh.cols, unaligned);
  constexpr uint32_t kMax = 32;
  std::mt19937 rng(sh.rows * 5 + sh.cols + uint32_t(t));
  const auto w = llm::test::random_rows(t, sh.cols, sh.rows, rng);
  const uint64_t rb = w.size() / sh.rows;
  std::vector<uint8_t> padded(w.size() + 8);
  std::memcpy(padded.data() + (unaligned ? 8 : 0), w.data(), w.size());
  const auto x = gpunvme::test::random_x(uint64_t(kMax) * sh.cols, rng);
  std::vector<float> bias(sh.rows);
  for (float& b : bias) b = std::uniform_real_distribution<float>(-1, 1)(rng);
  DeviceArray<uint8_t> dw(padded);
  DeviceArray<float> dx(x), db(bias);
  const GpuMatrix m{t, dw.p + (unaligned ? 8 : 0), rb, sh.rows, sh.cols, nullptr, 0};
  const ScopedQ8Types on(kAllQ8Types);
  REQUIRE(gpu_matvec_q8_takes(t, sh.cols));
  // Each token alone (the one-token kernel), and its CPU twin.
  DeviceArray<float> dref(std::vector<float>(size_t(kMax) * sh.rows, NAN));
  for (uint32_t k = 0; k < kMax; ++k) gpu_matmul(nullptr, m, dx.p + size_t(k) * sh.cols, 1, db.p, dref.p + size_t(k) * sh.rows);
  require_launched();
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const auto ref = dref.get(size_t(kMax) * sh.rows);
  for (uint32_t k : {0u, 13u, kMax - 1}) {
    CAPTURE(k);
    const auto tw = twin(t, w.data(), rb, sh.rows, sh.cols, x.data() + size_t(k) * sh.cols, bias.data());
    gpunvme::test::require_bits(std::vector<float>(ref.begin() + size_t(k) * sh.rows, ref.begin() + size_t(k + 1) * sh.rows), tw);
  }
  // Passes of n tokens, through gpu_matmul and the batched entry (n = 1 included); a pass's tiles (8
  // tokens) and their partial last ones.
  for (uint32_t n : {1u, 2u, 3u, 7u, 8u, 9u, 16u, 17u, 31u, 32u}) {
    CAPTURE(n);
    DeviceArray<float> dy(std::vector<float>(size_t(n) * sh.rows, NAN)), dyb(std::vector<float>(size_t(n) * sh.rows, NAN));
    gpu_matmul(nullptr, m, dx.p, n, db.p, dy.p);
    gpu_matmul_batched(nullptr, m, dx.p, n, db.p, dyb.p);
    require_launched();
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const std::vector<float> want(ref.begin(), ref.begin() + size_t(n) * sh.rows);
    gpunvme::test::require_bits(dy.get(size_t(n) * sh.rows), want);
    gpunvme::test::require_bits(dyb.get(size_t(n) * sh.rows), want);
  }
}

TEST_CASE("8-bit x selected matrices of a stack: each the one-token product's bits", "[gpu][llm]") {
  REQUIRE_GPU();
  const GgmlType t = GENERATE(GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_K);
  const uint32_t rows = 768, cols = 2048, mats = 3;
  CAPTURE(gguf::ggml_type_name(uint32_t(t)));
  std::mt19937 rng(4242 + uint32_t(t));
  const auto w = llm::test::random_rows(t, cols, uint64_t(rows) * mats, rng);
  const uint64_t rb = w.size() / (uint64_t(rows) * mats), mat = rb * rows;
  const auto x = gpunvme::test::random_x(uint64_t(4) * cols, rng);
  const std::vector<uint32_t> sel{2, 0, 2, 1};
  DeviceArray<uint8_t> dw(w);
  DeviceArray<float> dx(x);
  DeviceArray<uint32_t> ds(sel);
  const ScopedQ8Types on(kAllQ8Types);
  auto one = [&](uint32_t e, const float* xv, float* y) {
    gpu_matmul(nullptr, GpuMatrix{t, dw.p + e * mat, rb, rows, cols, nullptr, 0}, xv, 1, nullptr, y);
  };
  SECTION("a vector each (the down projections)") {
    DeviceArray<float> dy(std::vector<float>(size_t(4) * rows, NAN)), dr(std::vector<float>(size_t(4) * rows, NAN));
    gpu_matvec_selected(nullptr, GpuMatrix{t, dw.p, rb, rows, cols, ds.p, mat}, 4, dx.p, cols, dy.p, rows);
    for (uint32_t j = 0; j < 4; ++j) one(sel[j], dx.p + size_t(j) * cols, dr.p + size_t(j) * rows);
    require_launched();
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    gpunvme::test::require_bits(dy.get(size_t(4) * rows), dr.get(size_t(4) * rows));
    const auto y = dy.get(size_t(4) * rows);
    const auto tw = twin(t, w.data() + sel[3] * mat, rb, rows, cols, x.data() + size_t(3) * cols, nullptr);
    gpunvme::test::require_bits(std::vector<float>(y.begin() + size_t(3) * rows, y.end()), tw);
  }
  SECTION("one vector (gate and up)") {
    DeviceArray<float> dy(std::vector<float>(size_t(4) * rows, NAN)), dr(std::vector<float>(size_t(4) * rows, NAN));
    gpu_matvec_selected(nullptr, GpuMatrix{t, dw.p, rb, rows, cols, ds.p, mat}, 4, dx.p, 0, dy.p, rows);
    for (uint32_t j = 0; j < 4; ++j) one(sel[j], dx.p, dr.p + size_t(j) * rows);
    require_launched();
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    gpunvme::test::require_bits(dy.get(size_t(4) * rows), dr.get(size_t(4) * rows));
  }
  SECTION("a pass through a selected matrix (the grouped experts' entry)") {
    DeviceArray<float> dy(std::vector<float>(size_t(4) * rows, NAN)), dr(std::vector<float>(size_t(4) * rows, NAN));
    gpu_matmul(nullptr, GpuMatrix{t, dw.p, rb, rows, cols, ds.p + 3, mat}, dx.p, 4, nullptr, dy.p);  // matrix sel[3]
    for (uint32_t j = 0; j < 4; ++j) one(sel[3], dx.p + size_t(j) * cols, dr.p + size_t(j) * rows);
    require_launched();
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    gpunvme::test::require_bits(dy.get(size_t(4) * rows), dr.get(size_t(4) * rows));
  }
}
