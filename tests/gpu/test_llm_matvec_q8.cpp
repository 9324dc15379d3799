// The 8-bit-activation one-token products (issue 36's trial, gpu_matmul.h's gpu_matvec_q8): on the GPU
// they must give quant/q8_dot.h's CPU twin to the bit, for every entry that takes them (a product alone,
// Q/K/V in one launch, gate/up with the GLU, the product with the residual add), at one and two rows a
// warp and aligned and unaligned rows; and be the exact product of the FP32 weights and x up to x's
// rounding to 8 bits (bounded per block by its scale), which the test prints.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "examples/llm/compute/gpu_matmul.h"
#include "examples/llm/compute/q8_scope.h"
#include "examples/llm/compute/q8_types.h"
#include "examples/llm/quant/q8_dot.h"
#include "device_array.h"
#include "gpu_rig.h"
#include "q8_vectors.h"
#include "tests/llm/tiny_model.h"

using namespace gpunvme;
using namespace gpunvme::llm;
using gpunvme::test::DeviceArray;
using gpunvme::test::random_x;
using gpunvme::test::require_bits;

namespace {

// The 8-bit path on for every type for a test's scope.
struct Q8On : ScopedQ8Types {
  Q8On() : ScopedQ8Types(kAllQ8Types) {}
};

std::vector<float> twin(const std::vector<uint8_t>& w, uint32_t rows, uint32_t cols, const std::vector<float>& x,
                        GgmlType t = GgmlType::Q4_K) {
  const Q8Vector q = q8_quantize(x.data(), cols);
  const uint64_t rb = w.size() / rows;
  std::vector<float> y(rows);
  for (uint32_t r = 0; r < rows; ++r) y[r] = row_dot_q8(t, w.data() + r * rb, cols, q);
  return y;
}

// A row's weights as floats (dequant.h's values).
std::vector<float> dequant_row(GgmlType t, const uint8_t* row, uint32_t cols) {
  std::vector<float> out(cols);
  for (uint32_t g = 0; g < cols / kGroup; ++g) dequant_group(t, row, g, out.data() + g * kGroup);
  return out;
}

}  // namespace

TEST_CASE("8-bit x matrix-vector product: the CPU twin's bits, within x's rounding of the FP32 product", "[gpu][llm]") {
  REQUIRE_GPU();
  struct Shape { uint32_t rows, cols; };
  // 37 and 1000 rows: one row a warp; 4096: two (staged_launch's rule); 14336 wide: Llama-3-8B's down;
  // 3300 x 32768: two rows a warp where Q6_K's and Q8_0's scratch does not fit beside x (their old loop).
  const Shape sh = GENERATE(Shape{37, 256}, Shape{1000, 4096}, Shape{4096, 4096}, Shape{300, 14336}, Shape{70, 2816},
                            Shape{3300, 32768});
  // Rows at 8 bytes past a 16-byte boundary (the word loads; Q6_K's and Q8_0's scratch still) or 2 (their old loop).
  const uint32_t offset = GENERATE(0u, 8u, 2u);
  const GgmlType t = GENERATE(GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0);
  CAPTURE(gguf::ggml_type_name(uint32_t(t)), sh.rows, sh.cols, offset);
  std::mt19937 rng(sh.rows * 7 + sh.cols + uint32_t(t));
  const auto w = llm::test::random_rows(t, sh.cols, sh.rows, rng);
  const uint64_t rb = w.size() / sh.rows;
  std::vector<uint8_t> padded(w.size() + 8);
  std::memcpy(padded.data() + offset, w.data(), w.size());
  const auto x = random_x(sh.cols, rng);
  std::vector<float> bias(sh.rows);
  for (float& b : bias) b = std::uniform_real_distribution<float>(-1, 1)(rng);
  DeviceArray<uint8_t> dw(padded);
  DeviceArray<float> dx(x), db(bias), dy(std::vector<float>(sh.rows, NAN));
  const GpuMatrix m{t, dw.p + offset, rb, sh.rows, sh.cols, nullptr, 0};
  {
    Q8On on;
    gpu_matmul(nullptr, m, dx.p, 1, db.p, dy.p);
  }
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto y = dy.get(sh.rows);
  auto ref = twin(w, sh.rows, sh.cols, x, t);
  for (uint32_t r = 0; r < sh.rows; ++r) ref[r] = ref[r] + bias[r];
  require_bits(y, ref);

  // Against the exact product of the dequantised weights and x (double): x's rounding moves each
  // element by at most half its block's step (amax / 254), so |error| <= sum over blocks of that times
  // the block's sum of |w|, plus float rounding (a 1e-5 share of sum |w x|).
  const Q8Vector q = q8_quantize(x.data(), sh.cols);
  double worst = 0.0, worst_rel = 0.0;
  for (uint32_t r = 0; r < sh.rows; ++r) {
    const std::vector<float> wr = dequant_row(t, w.data() + r * rb, sh.cols);
    double exact = bias[r], bound = 0.0, mag = 0.0;
    for (uint32_t g = 0; g < sh.cols / kQ8Block; ++g) {
      double wabs = 0.0;
      for (int i = 0; i < kQ8Block; ++i) {
        const uint32_t e = g * kQ8Block + i;
        exact += double(wr[e]) * x[e];
        wabs += std::fabs(wr[e]);
        mag += std::fabs(double(wr[e]) * x[e]);
      }
      bound += double(q.d[g]) / 2 * wabs;
    }
    const double err = std::fabs(double(y[r]) - exact);
    CAPTURE(r, y[r], exact, bound, mag);
    REQUIRE(err <= bound * 1.001 + 1e-5 * mag + 1e-6);
    worst = std::max(worst, err);
    worst_rel = std::max(worst_rel, err / std::max(mag, 1e-30));
  }
  std::printf("q8 matvec %s %ux%u at +%u: largest |8-bit - FP32-exact| %.3g (%.3g of sum |w x|)\n", gguf::ggml_type_name(uint32_t(t)).c_str(),
              sh.rows, sh.cols, offset, worst, worst_rel);
}

TEST_CASE("8-bit x fused entries: Q/K/V, gate/up+GLU and +add give the CPU twin's bits", "[gpu][llm]") {
  REQUIRE_GPU();
  const uint32_t cols = 4096, rows[3] = {4096, 1024, 1024}, ffn = 1400;
  const GgmlType t = GENERATE(GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0);  // Q6_K, Q8_0: through scratch in every row set
  CAPTURE(gguf::ggml_type_name(uint32_t(t)));
  std::mt19937 rng(36);
  const auto x = random_x(cols, rng);
  DeviceArray<float> dx(x);
  Q8On on;
  SECTION("Q, K and V in one launch") {
    std::vector<std::vector<uint8_t>> w;
    std::vector<std::unique_ptr<DeviceArray<uint8_t>>> dw;
    std::vector<std::unique_ptr<DeviceArray<float>>> dy;
    std::vector<GpuProduct> ps;
    for (uint32_t p = 0; p < 3; ++p) {
      w.push_back(llm::test::random_rows(t, cols, rows[p], rng));
      dw.push_back(std::make_unique<DeviceArray<uint8_t>>(w[p]));
      dy.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(rows[p], NAN)));
      ps.push_back({GpuMatrix{t, dw[p]->p, w[p].size() / rows[p], rows[p], cols, nullptr, 0}, nullptr, dy[p]->p});
    }
    gpu_matvecs(nullptr, ps, dx.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    for (uint32_t p = 0; p < 3; ++p) {
      auto ref = twin(w[p], rows[p], cols, x, t);
      for (float& v : ref) v = v + 0.0f;  // MatrixRows's dot + 0 (no bias)
      require_bits(dy[p]->get(rows[p]), ref);
    }
  }
  SECTION("gate and up with the GLU") {
    const auto wg = llm::test::random_rows(t, cols, ffn, rng), wu = llm::test::random_rows(t, cols, ffn, rng);
    DeviceArray<uint8_t> dg(wg), du(wu);
    DeviceArray<float> dy(std::vector<float>(ffn, NAN));
    const GpuMatrix gate{t, dg.p, wg.size() / ffn, ffn, cols, nullptr, 0};
    GpuMatrix up = gate;
    up.w = du.p;
    REQUIRE(gpu_matvec_glu(nullptr, gate, up, dx.p, FfnAct::kSilu, dy.p));
    // The GLU of the twin's products by the GPU's GLU kernel (the host's expf may round otherwise).
    auto g = twin(wg, ffn, cols, x, t), u = twin(wu, ffn, cols, x, t);
    for (uint32_t r = 0; r < ffn; ++r) g[r] = g[r] + 0.0f, u[r] = u[r] + 0.0f;
    DeviceArray<float> rg(g), ru(u);
    gpu_glu(nullptr, rg.p, ru.p, ffn, FfnAct::kSilu);
    require_bits(dy.get(ffn), rg.get(ffn));
  }
  SECTION("a product with the residual add") {
    const auto w = llm::test::random_rows(t, cols, cols, rng);
    std::vector<float> y0(cols);
    for (float& v : y0) v = std::normal_distribution<float>(0, 1)(rng);
    DeviceArray<uint8_t> dw(w);
    DeviceArray<float> dy(y0);
    REQUIRE(gpu_matvec_add(nullptr, GpuMatrix{t, dw.p, w.size() / cols, cols, cols, nullptr, 0}, dx.p, nullptr, dy.p));
    const auto d = twin(w, cols, cols, x, t);
    std::vector<float> ref(cols);
    for (uint32_t r = 0; r < cols; ++r) ref[r] = y0[r] + (d[r] + 0.0f);
    require_bits(dy.get(cols), ref);
  }
}

// The 8-bit kernels launch without the shared-memory opt-in, so x (36 bytes a 32-wide group) and
// stage_q8's 64 static bytes must fit 48 KB together: Q8_0 1363 groups wide (49,068 + 64 bytes) takes the
// 8-bit path with the twin's bits; 1364 (49,104 + 64 > 49,152) must be left to the FP32 kernels (their
// bits, no refused launch), where counting x alone took it and the launch failed ("invalid argument").
TEST_CASE("8-bit x at the shared-memory limit: x and the static bytes within 48 KB, wider goes FP32", "[gpu][llm]") {
  REQUIRE_GPU();
  const uint32_t groups = GENERATE(1363u, 1364u), cols = groups * kQ8Block, rows = 40;
  const bool taken = groups == 1363;
  CAPTURE(cols);
  std::mt19937 rng(cols);
  const auto w = llm::test::random_rows(GgmlType::Q8_0, cols, rows, rng);
  const auto x = random_x(cols, rng);
  DeviceArray<uint8_t> dw(w);
  DeviceArray<float> dx(x), dy(std::vector<float>(rows, NAN)), dfp(std::vector<float>(rows, NAN));
  const GpuMatrix m{GgmlType::Q8_0, dw.p, w.size() / rows, rows, cols, nullptr, 0};
  {
    Q8On on;
    CHECK(gpu_matvec_q8_takes(GgmlType::Q8_0, cols) == taken);
    gpu_matmul(nullptr, m, dx.p, 1, nullptr, dy.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
  }
  {
    const ScopedQ8Types off(0);  // the FP32 kernels
    gpu_matmul(nullptr, m, dx.p, 1, nullptr, dfp.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  if (taken) require_bits(dy.get(rows), twin(w, rows, cols, x, GgmlType::Q8_0));
  else require_bits(dy.get(rows), dfp.get(rows));
}
