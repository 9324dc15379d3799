// The engine's batched matrix kernel (examples/llm/compute/gpu_matmul.h) on the GPU: for every weight
// type, batch sizes across the kernel's token tile, rows that do not fill a block, wide rows (up to
// Llama-3-70B's 28672-wide FFN row) and a stacked expert matrix chosen by a device-side id, every (row, token) result must
// have the bits of the single-token matrix-vector kernel (so a batched pass gives the logits of
// single-token passes), and be the CPU's dot product up to float rounding.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "examples/llm/compute/gpu_matmul.h"
#include "examples/llm/compute/ops.h"
#include "gpu_rig.h"
#include "tests/llm/tiny_model.h"

using namespace gpunvme;
using namespace gpunvme::llm;

namespace {

template <class T>
struct DeviceArray {
  T* p = nullptr;
  explicit DeviceArray(const std::vector<T>& v) {
    REQUIRE(cudaMalloc(&p, v.size() * sizeof(T) + 1) == cudaSuccess);
    REQUIRE(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~DeviceArray() { cudaFree(p); }
  std::vector<T> get(size_t n) const {
    std::vector<T> v(n);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
};

}  // namespace

TEST_CASE("batched matrix kernel: the matrix-vector kernel's bits for every token", "[gpu][llm]") {
  REQUIRE_GPU();
  const GgmlType t = GENERATE(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K);
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
