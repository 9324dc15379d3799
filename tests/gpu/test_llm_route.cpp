// The engine's routing kernel (examples/llm/compute/gpu_route.h): the warp kernel must give the
// one-thread kernel's ids and weights to the bit for every expert count the engine routes (up to
// 256), every k, and logits with ties, -inf, NaN and all-equal values; on well-separated logits both
// must pick the k largest logits in order, with weights summing to 1.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "examples/llm/compute/gpu_route.h"
#include "examples/llm/compute/route.h"
#include "gpu_rig.h"

using namespace gpunvme;
using namespace gpunvme::llm;

namespace {

enum class Logits { kNormal, kTies, kWithInfinities, kWithNaN, kAllEqual, kSeparated };

std::vector<float> make_logits(Logits kind, uint32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  switch (kind) {
    case Logits::kNormal: break;
    case Logits::kTies:  // three levels: many exact ties of p
      for (float& x : v) x = std::round(x) * 0.5f;
      break;
    case Logits::kWithInfinities:
      for (uint32_t i = 0; i < n; i += 3) v[i] = -std::numeric_limits<float>::infinity();
      break;
    case Logits::kWithNaN: v[n / 2] = std::numeric_limits<float>::quiet_NaN(); break;
    case Logits::kAllEqual: std::fill(v.begin(), v.end(), 0.25f); break;
    case Logits::kSeparated:  // distinct, 0.25 apart, shuffled: the top k are unambiguous (256 of them span
                              // 64, so no probability underflows to a tie at 0)
      std::iota(v.begin(), v.end(), 0.0f);
      for (float& x : v) x = x * 0.25f - float(n) * 0.125f;
      std::shuffle(v.begin(), v.end(), rng);
      break;
  }
  return v;
}

struct Routed {
  std::vector<uint32_t> ids;
  std::vector<float> weights;
};

Routed route_on_gpu(bool serial, const std::vector<float>& logits, uint32_t k, Gating gating = Gating::kSoftmax) {
  float* d_logits = nullptr;
  uint32_t* d_ids = nullptr;
  REQUIRE(cudaMalloc(&d_logits, logits.size() * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&d_ids, k * (sizeof(uint32_t) + sizeof(float))) == cudaSuccess);
  REQUIRE(cudaMemcpy(d_logits, logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemset(d_ids, 0xEE, k * (sizeof(uint32_t) + sizeof(float))) == cudaSuccess);
  float* d_weights = reinterpret_cast<float*>(d_ids + k);
  (serial ? gpu_route_serial : gpu_route)(nullptr, d_logits, uint32_t(logits.size()), k, d_ids, d_weights, gating);
  Routed r{std::vector<uint32_t>(k), std::vector<float>(k)};
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemcpy(r.ids.data(), d_ids, k * sizeof(uint32_t), cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(r.weights.data(), d_weights, k * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaFree(d_logits);
  cudaFree(d_ids);
  return r;
}

// Separated logits: the ids are the k largest logits, largest first (ties to the lower id), and the
// weights sum to 1, whichever the gating. Returns those ids.
std::vector<uint32_t> check_top_k(const std::vector<float>& logits, const Routed& r) {
  std::vector<uint32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return logits[a] > logits[b]; });
  order.resize(r.ids.size());
  CHECK(r.ids == order);
  double sum = 0;
  for (float w : r.weights) sum += w;
  CHECK(std::abs(sum - 1.0) < 1e-5);
  return order;
}

}  // namespace

TEST_CASE("routing kernel: the warp kernel gives the one-thread kernel's ids and weights to the bit", "[gpu][llm][route]") {
  REQUIRE_GPU();
  const uint32_t n = GENERATE(1u, 2u, 8u, 33u, 60u, 128u, 160u, 256u);
  const uint32_t k_want = GENERATE(1u, 2u, 8u, 64u, 256u);
  const uint32_t k = std::min(k_want, n);
  const Logits kind = GENERATE(Logits::kNormal, Logits::kTies, Logits::kWithInfinities, Logits::kWithNaN,
                               Logits::kAllEqual, Logits::kSeparated);
  CAPTURE(n, k, int(kind));
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const std::vector<float> logits = make_logits(kind, n, seed * 7919 + n);
    const Routed warp = route_on_gpu(false, logits, k), serial = route_on_gpu(true, logits, k);
    CHECK(warp.ids == serial.ids);
    CHECK(std::memcmp(warp.weights.data(), serial.weights.data(), k * sizeof(float)) == 0);
    if (kind == Logits::kSeparated) {
      // Both are also right: the k largest logits, largest first, weights summing to 1.
      check_top_k(logits, warp);
      CHECK(std::is_sorted(warp.weights.begin(), warp.weights.end(), std::greater<float>()));
    }
    if (kind == Logits::kAllEqual) {
      // Ties go to the lowest id: 0, 1, ..., k-1.
      std::vector<uint32_t> first(k);
      std::iota(first.begin(), first.end(), 0u);
      CHECK(warp.ids == first);
    }
  }
}

TEST_CASE("routing kernel: the CPU backend's routing (route_top_k on one host lane), ids equal, weights to float rounding", "[gpu][llm][route][ops]") {
  REQUIRE_GPU();
  const uint32_t n = GENERATE(8u, 60u, 128u, 256u);
  const uint32_t k = GENERATE(1u, 2u, 8u);
  // Logits whose probabilities are equal or well apart on both sides: CUDA's expf and glibc's differ in
  // the last bits, which can only reorder experts closer than that.
  const Logits kind = GENERATE(Logits::kTies, Logits::kAllEqual, Logits::kSeparated);
  CAPTURE(n, k, int(kind));
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const std::vector<float> logits = make_logits(kind, n, seed * 104729 + n);
    const Routed gpu = route_on_gpu(false, logits, k);
    Routed cpu{std::vector<uint32_t>(k), std::vector<float>(k)};
    std::vector<float> p(n);
    route_top_k(OneLane{}, logits.data(), n, k, Gating::kSoftmax, p.data(), cpu.ids.data(), cpu.weights.data());
    CHECK(gpu.ids == cpu.ids);
    for (uint32_t j = 0; j < k; ++j) CHECK(std::fabs(gpu.weights[j] - cpu.weights[j]) <= 4e-6f * cpu.weights[j]);
  }
}

// gpt-oss's gating (Gating::kSoftmaxSelected, llama.cpp's SOFTMAX_WEIGHT): the top k of the raw logits, then a
// softmax over those k. Warp = one thread to the bit; both = the CPU's route_top_k, ids equal, weights to
// float rounding; and right: with separated logits the k largest, largest first, weights summing to 1, the
// first over the second by exp of their logits' difference.
TEST_CASE("routing kernel: softmax over the selected experts (gpt-oss), warp = serial = CPU", "[gpu][llm][route][ops]") {
  REQUIRE_GPU();
  const uint32_t n = GENERATE(8u, 32u, 128u);
  const uint32_t k = GENERATE(1u, 4u, 8u);
  const Logits kind = GENERATE(Logits::kNormal, Logits::kTies, Logits::kWithInfinities, Logits::kSeparated);
  CAPTURE(n, k, int(kind));
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const std::vector<float> logits = make_logits(kind, n, seed * 6151 + n);
    const Routed warp = route_on_gpu(false, logits, k, Gating::kSoftmaxSelected);
    const Routed serial = route_on_gpu(true, logits, k, Gating::kSoftmaxSelected);
    CHECK(warp.ids == serial.ids);
    CHECK(std::memcmp(warp.weights.data(), serial.weights.data(), k * sizeof(float)) == 0);
    Routed cpu{std::vector<uint32_t>(k), std::vector<float>(k)};
    std::vector<float> p(n);
    route_top_k(OneLane{}, logits.data(), n, k, Gating::kSoftmaxSelected, p.data(), cpu.ids.data(), cpu.weights.data());
    CHECK(warp.ids == cpu.ids);
    for (uint32_t j = 0; j < k; ++j) CHECK(std::fabs(warp.weights[j] - cpu.weights[j]) <= 4e-6f * cpu.weights[j]);
    if (kind == Logits::kSeparated) {
      const std::vector<uint32_t> order = check_top_k(logits, warp);
      if (k > 1) CHECK(std::fabs(warp.weights[0] / warp.weights[1] - std::exp(logits[order[0]] - logits[order[1]])) < 1e-4);
    }
  }
}
