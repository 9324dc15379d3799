// The prompt passes' tensor-core product (examples/llm/compute/gpu_gemm.h) on the GPU: for every weight
// type, passes of 33, 64 and 512 tokens against the FP32 batched kernel within what rounding the inputs
// to 16 bits explains; passes of up to kSmallPassTokens still on the FP32 kernels, to the bit; and a
// 100-token prompt through the GPU executor giving the CPU executor's greedy tokens.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/generators/catch_generators_range.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "examples/llm/compute/gpu_gemm.h"
#include "examples/llm/compute/q8_scope.h"
#include "examples/llm/engine/executor.h"
#include "examples/llm/quant/weight_types.h"
#include "device_array.h"
#include "gpu_rig.h"
#include "llm_fixtures.h"
#include "tests/llm/tiny_model.h"

using namespace gpunvme;
using namespace gpunvme::llm;
using Catch::Generators::from_range;
using gpunvme::test::DeviceArray;

namespace {

const std::vector<GgmlType> kTypes(kComputedTypes.begin(), kComputedTypes.end());

struct Problem {
  std::vector<uint8_t> w;
  std::vector<float> x, bias;
  uint64_t row_bytes = 0;
};

Problem make_problem(GgmlType t, uint32_t rows, uint32_t cols, uint32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p;
  p.w = llm::test::random_rows(t, cols, rows, rng);
  p.row_bytes = p.w.size() / rows;
  p.x.resize(size_t(n) * cols);
  p.bias.resize(rows);
  std::normal_distribution<float> d;
  for (float& v : p.x) v = d(rng);
  for (float& v : p.bias) v = d(rng);
  return p;
}

}  // namespace

// Each output within gemm_error_bound (gpu_gemm.h says what it counts) of the batched kernel's.
TEST_CASE("tensor-core product: within 16-bit input rounding of the FP32 batched kernel, every type", "[gpu][llm][gemm]") {
  REQUIRE_GPU();
  const ScopedQ8Types fp32(0);  // the FP32 batched kernel: the 8-bit path (gpu_matmul.h) off
  const GgmlType t = GENERATE(from_range(kTypes));
  const uint32_t n = GENERATE(33u, 64u, 512u);
  struct Shape { uint32_t rows, cols; };
  const Shape sh = GENERATE(Shape{300, 512}, Shape{37, 768});
  CAPTURE(gguf::ggml_type_name(uint32_t(t)), n, sh.rows, sh.cols);
  const Problem p = make_problem(t, sh.rows, sh.cols, n, uint32_t(t) * 13 + n + sh.cols);
  // A scratch of 128 rows: 300 rows take three chunks, the last one partial.
  TensorGemm gemm(512, 768, 128ull * 768 * 2);
  REQUIRE(gemm.chunk_rows(sh.cols) == 128u);
  DeviceArray<uint8_t> dw(p.w);
  DeviceArray<float> dx(p.x), db(p.bias), dy(std::vector<float>(size_t(n) * sh.rows, NAN)),
      dref(std::vector<float>(size_t(n) * sh.rows, NAN));
  const GpuMatrix m{t, dw.p, p.row_bytes, sh.rows, sh.cols, nullptr, 0};
  gpu_matmul_pass(nullptr, &gemm, m, dx.p, n, db.p, dy.p);
  gpu_matmul_batched(nullptr, m, dx.p, n, db.p, dref.p);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto y = dy.get(size_t(n) * sh.rows), ref = dref.get(size_t(n) * sh.rows);
  double worst = 0;  // the largest error as a fraction of its bound
  bool differs = false;
  for (uint32_t r = 0; r < sh.rows; ++r)
    for (uint32_t k = 0; k < n; ++k) {
      const double bound = gemm_error_bound(t, p.w.data() + r * p.row_bytes, sh.cols, &p.x[size_t(k) * sh.cols]);
      const float got = y[size_t(k) * sh.rows + r], want = ref[size_t(k) * sh.rows + r];
      CAPTURE(r, k, got, want, bound);
      REQUIRE(std::isfinite(got));
      REQUIRE(std::fabs(double(got) - want) <= bound);
      worst = std::max(worst, std::fabs(double(got) - want) / bound);
      differs = differs || std::memcmp(&got, &want, 4) != 0;
    }
  INFO("largest error: " << worst << " of the bound");
  CHECK(worst > 0);
  REQUIRE(differs);  // the product did run on the tensor cores: rounded inputs leave some result's last bits
}

// Passes of 1..kSmallPassTokens tokens keep the small-pass kernels even where a tensor-core product exists:
// each token's outputs have the bits of a one-token pass (speculative = greedy, streamed = resident).
TEST_CASE("tensor-core product: passes of up to 32 tokens keep the matrix-vector kernel's bits", "[gpu][llm][gemm]") {
  REQUIRE_GPU();
  const GgmlType t = GENERATE(from_range(kTypes));
  const uint32_t n = GENERATE(1u, 9u, kSmallPassTokens);
  CAPTURE(gguf::ggml_type_name(uint32_t(t)), n);
  const uint32_t rows = 300, cols = 512;
  const Problem p = make_problem(t, rows, cols, n, uint32_t(t) * 17 + n);
  TensorGemm gemm(512, cols);
  DeviceArray<uint8_t> dw(p.w);
  DeviceArray<float> dx(p.x), db(p.bias), dy(std::vector<float>(size_t(n) * rows, NAN)),
      dref(std::vector<float>(size_t(n) * rows, NAN));
  const GpuMatrix m{t, dw.p, p.row_bytes, rows, cols, nullptr, 0};
  gpu_matmul_pass(nullptr, &gemm, m, dx.p, n, db.p, dy.p);
  for (uint32_t k = 0; k < n; ++k) gpu_matmul(nullptr, m, dx.p + size_t(k) * cols, 1, db.p, dref.p + size_t(k) * rows);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto y = dy.get(size_t(n) * rows), ref = dref.get(size_t(n) * rows);
  REQUIRE(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)) == 0);
}

TEST_CASE("tensor-core product: refuses passes and rows beyond its sizes, and stacks picked on the device", "[gpu][llm][gemm]") {
  REQUIRE_GPU();
  TensorGemm gemm(64, 256);
  const Problem p = make_problem(GgmlType::Q8_0, 8, 512, 65, 1);
  DeviceArray<uint8_t> dw(p.w);
  DeviceArray<float> dx(p.x), dy(std::vector<float>(65 * 8, 0.0f));
  DeviceArray<uint32_t> dsel(std::vector<uint32_t>{0});
  GpuMatrix m{GgmlType::Q8_0, dw.p, p.row_bytes, 8, 256, nullptr, 0};
  CHECK_THROWS_AS(gemm.matmul(nullptr, m, dx.p, 65, nullptr, dy.p), std::logic_error);  // 65 tokens > 64
  m.cols = 512;
  CHECK_THROWS_AS(gemm.matmul(nullptr, m, dx.p, 40, nullptr, dy.p), std::logic_error);  // 512 columns > 256
  m.cols = 256;
  m.sel = dsel.p;
  m.mat_bytes = p.row_bytes * 8;
  CHECK_THROWS_AS(gemm.matmul(nullptr, m, dx.p, 40, nullptr, dy.p), std::logic_error);
  gpu_matmul_pass(nullptr, &gemm, m, dx.p, 40, nullptr, dy.p);  // the dispatch keeps a stack on the FP32 kernels
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
}

// The engine: a 100-token prompt in one pass (its matrices on the tensor cores), then greedy steps, on
// the GPU executor (every layer in VRAM, and one layer with two streamed: the pass copies a streamed
// layer to GPU memory first) against the CPU executor, the exact reference; with the tensor cores off,
// the prompt's logits are token by token's to the bit. The last prompt token's
// logits must agree within 1 % of their largest magnitude, and the greedy tokens wherever the CPU's
// margin between its token and the GPU's is more than twice the largest logit difference seen (a
// token may differ only at a tie the rounding can flip). Resident and streamed give the same bits.
TEST_CASE("tensor-core product in the engine: a 100-token prompt gives the CPU executor's greedy tokens", "[gpu][llm][gemm]") {
  REQUIRE_GPU();
  // The FP32 products against the FP32 CPU executor: with 8-bit x (the default) step 1's logits moved by
  // 1.1 % of their largest (0.0316 of 2.86; H200, a7fc8d1), over this rule's 1 %, the same token; the
  // 8-bit decode is held to llama.cpp's tokens by reference_check.py and to its CPU twin by "8-bit*".
  const ScopedQ8Types fp32(0);
  gpunvme::test::DeployedModel d(0, "gemm-test");
  gpunvme::test::Opened o(d.device);
  const uint32_t n_prompt = 100, steps = 8, n_ctx = 128;
  const std::vector<uint32_t> prompt = llm::test::random_tokens(n_prompt, o.m.config.n_vocab, 5);
  struct Run {
    std::vector<float> prompt_logits;
    std::vector<uint32_t> tokens;
    std::vector<std::vector<float>> step_logits;
  };
  auto greedy = [&](llm::Executor& ex) {
    Run r;
    const std::span<const float> l = ex.pass(prompt, 0, false);
    r.prompt_logits.assign(l.begin(), l.end());
    uint32_t tok = uint32_t(std::max_element(l.begin(), l.end()) - l.begin());
    for (uint32_t i = 0; i < steps; ++i) {
      r.tokens.push_back(tok);
      const std::span<const float> s = ex.step(tok, n_prompt + i);
      r.step_logits.emplace_back(s.begin(), s.end());
      tok = uint32_t(std::max_element(s.begin(), s.end()) - s.begin());
    }
    ex.finish();
    return r;
  };
  const Run cpu = greedy(*llm::make_cpu_executor(o.m, n_ctx));
  llm::GpuExecOptions all, streamed;
  all.resident_layers = o.m.config.n_layer;
  all.max_batch = streamed.max_batch = n_prompt;
  streamed.resident_layers = 1;
  const Run gpu = greedy(*llm::make_gpu_executor(*o.ctrl, o.m, n_ctx, all));
  const Run gpu_streamed = greedy(*llm::make_gpu_executor(*o.ctrl, o.m, n_ctx, streamed));
  REQUIRE(llm::test::same_bits(gpu.prompt_logits, gpu_streamed.prompt_logits));
  REQUIRE(gpu.tokens == gpu_streamed.tokens);
  // With the fast kernels off (--prompt-kernels exact) the prompt pass has token by token's bits.
  llm::GpuExecOptions exact = all, one = all;
  exact.fast_prompt = false;
  one.max_batch = 1;
  const Run gpu_exact = greedy(*llm::make_gpu_executor(*o.ctrl, o.m, n_ctx, exact));
  std::vector<float> by_token;
  {
    auto ex = llm::make_gpu_executor(*o.ctrl, o.m, n_ctx, one);
    for (uint32_t i = 0; i < n_prompt; ++i) {
      const std::span<const float> l = ex->step(prompt[i], i);
      if (i + 1 == n_prompt) by_token.assign(l.begin(), l.end());
    }
    ex->finish();
  }
  REQUIRE(llm::test::same_bits(gpu_exact.prompt_logits, by_token));
  REQUIRE(!llm::test::same_bits(gpu.prompt_logits, by_token));  // and with them on, it did take the tensor cores

  // Step i compares logits computed from the same tokens on both sides (those before i are equal).
  for (uint32_t i = 0; i < steps; ++i) {
    const std::vector<float>& want = i == 0 ? cpu.prompt_logits : cpu.step_logits[i - 1];
    const std::vector<float>& got = i == 0 ? gpu.prompt_logits : gpu.step_logits[i - 1];
    float diff = 0, mag = 0;
    for (size_t j = 0; j < want.size(); ++j) {
      diff = std::max(diff, std::fabs(got[j] - want[j]));
      mag = std::max(mag, std::fabs(want[j]));
    }
    const float margin = want[cpu.tokens[i]] - want[gpu.tokens[i]];
    CAPTURE(i, cpu.tokens[i], gpu.tokens[i], margin, diff, mag);
    REQUIRE(mag > 0);
    REQUIRE(diff <= 0.01f * mag);
    if (cpu.tokens[i] != gpu.tokens[i]) {
      REQUIRE(margin <= 2 * diff);  // a near tie the rounding can flip: the comparison stops there
      break;
    }
  }
}
