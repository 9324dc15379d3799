// Each operation of the transformer block (examples/llm/compute/block.h) on the GPU backend against
// its CPU twin, as llama.cpp's test-backend-ops holds every backend to the CPU's operation by operation:
// one small random model (tests/llm/tiny_model.h) in both, the same activations written into both, one
// operation run on each, the outputs compared. The two add in other orders and the GPU's expf, powf,
// sinf and cosf are not glibc's, so results agree to float rounding, not to the bit: each comparison
// allows a small fraction of the output's largest magnitude (errors of layout, window, position, bias,
// norm or routing are of the order of the values themselves). Outputs are poisoned with NaN first, so an
// operation that writes nothing fails. Then whole blocks, layer after layer, over two passes.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/generators/catch_generators_range.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "examples/llm/compute/block.h"
#include "examples/llm/compute/cpu_forward.h"
#include "examples/llm/compute/gpu_forward.h"
#include "examples/llm/compute/gpu_gemm.h"
#include "examples/llm/compute/q8_scope.h"
#include "examples/llm/compute/q8_types.h"
#include "gpu_rig.h"
#include "runtime/gguf/ggml_types.h"
#include "tests/llm/tiny_model.h"

using namespace gpunvme;
using namespace gpunvme::llm;
using Catch::Generators::from_range;
using llm::test::Shape;

namespace {

constexpr uint32_t kCtx = 32;

// The model's bytes in GPU memory: a WeightView over them finds every tensor at its file offset.
struct DeviceBytes {
  uint8_t* p = nullptr;
  explicit DeviceBytes(const std::vector<uint8_t>& b) {
    REQUIRE(cudaMalloc(&p, b.size()) == cudaSuccess);
    REQUIRE(cudaMemcpy(p, b.data(), b.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~DeviceBytes() { cudaFree(p); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
};

// One model in both backends; every call goes to both. The GPU's products in FP32 (the CPU's arithmetic
// up to rounding) unless q8 names 8-bit types (kQ8Types' bits): then only the GPU's own bits are compared.
struct Twins {
  ScopedQ8Types q8_types;  // first: for the object's lifetime
  llm::test::TinyModel m;
  DeviceBytes d;
  PackedRanges whole;
  CpuForward cpu;
  GpuForward gpu;
  std::mt19937 rng{7};
  explicit Twins(llm::test::TinyModel model, uint32_t ctx = kCtx, uint32_t max_batch = 8, uint32_t q8 = 0)
      : q8_types(q8), m(std::move(model)), d(m.bytes), whole(PackedRanges::span(0, m.bytes.size())), cpu(m.c, m.w, m.bytes, ctx),
        gpu(m.c, m.w, ctx, GlobalWeights{at(m.w.token_embd), at(m.w.output_norm), at(m.w.output)}, nullptr, max_batch) {
    gpu.use_layer(WeightView{d.p, &whole});
  }
  const uint8_t* at(const TensorRef& t) const { return d.p + t.file_offset; }
  Backend* both[2] = {&cpu, &gpu};

  void pass(uint32_t pos0, uint32_t n) {
    for (Backend* b : both) b->set_pass(pos0, n);
  }
  size_t width(Act a) const { return act_width(m.c, a); }
  // Random values (normal, sigma 1) into a on both.
  void random(Act a, uint32_t n) {
    std::normal_distribution<float> d;
    std::vector<float> v(n * width(a));
    for (float& x : v) x = d(rng);
    for (Backend* b : both) b->write(a, v);
  }
  void poison(Act a, uint32_t n) {
    const std::vector<float> v(n * width(a), std::numeric_limits<float>::quiet_NaN());
    for (Backend* b : both) b->write(a, v);
  }
  // The GPU's a is the CPU's up to `rel` times the CPU's largest magnitude.
  void expect_close(Act a, float rel) {
    const std::vector<float> c = cpu.read(a), g = gpu.read(a);
    REQUIRE(c.size() == g.size());
    float scale = 0.0f, worst = 0.0f;
    size_t nonfinite = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      scale = std::max(scale, std::fabs(c[i]));
      if (!std::isfinite(g[i]) || !std::isfinite(c[i])) ++nonfinite;
      else worst = std::max(worst, std::fabs(g[i] - c[i]));
    }
    CAPTURE(int(a), worst, scale, rel);
    REQUIRE(nonfinite == 0);
    REQUIRE(scale > 0.0f);  // an all-zero reference would prove nothing
    CHECK(worst <= rel * scale);
  }
};

const std::vector<GgmlType> kTypes = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                                      GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::MXFP4};

// Layer 1's KV store and attention over passes (pos0, n) on random Q, K and V (by default three: the
// second and third attend to the earlier passes' cached positions and to their own, causally).
using Passes = std::initializer_list<std::pair<uint32_t, uint32_t>>;
// One pass (pos0, n) on both backends: random Q, K and V, the output poisoned, K and V stored, attention.
void attend_pass(Twins& t, const AttnParams& p, uint32_t pos0, uint32_t n) {
  t.pass(pos0, n);
  t.random(Act::kK, n);
  t.random(Act::kV, n);
  t.random(Act::kQ, n);
  t.poison(Act::kAtt, n);
  for (Backend* b : t.both) {
    b->store_kv(p.layer);
    b->attend(p);
  }
}
void attend_three_passes(Twins& t, const AttnParams& p, Passes passes = {{0u, 8u}, {8u, 4u}, {12u, 1u}}) {
  for (auto [pos0, n] : passes) {
    CAPTURE(pos0, n);
    attend_pass(t, p, pos0, n);
    t.expect_close(Act::kAtt, 1e-4f);
  }
}

}  // namespace

TEST_CASE("block ops: RMS norm (in place too) and the residual add, GPU = CPU", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  Twins t(llm::test::make_tiny(Shape::kGemma3, GgmlType::Q8_0));
  const LayerWeights& l = t.m.w.layers[0];
  for (uint32_t n : {1u, 5u}) {
    CAPTURE(n);
    t.pass(0, n);
    t.random(Act::kX, n);
    t.poison(Act::kXn, n);
    for (Backend* b : t.both) b->norm(Act::kX, l.attn_norm, Act::kXn);
    t.expect_close(Act::kXn, 1e-5f);
    t.random(Act::kTmp, n);
    for (Backend* b : t.both) b->norm(Act::kTmp, l.post_ffw_norm, Act::kTmp);
    t.expect_close(Act::kTmp, 1e-5f);
    for (Backend* b : t.both) b->add(Act::kX, Act::kTmp);
    t.expect_close(Act::kX, 1e-5f);
  }
}

// The fused operations of block.h around the products (issue 36): rope_store_kv (Q/K norms, RoPE and the
// KV store: one kernel on the GPU), norm_add (a post-norm and its residual add: one kernel) and
// matmul_norm_add (a product with both: one launch for one token). Each GPU fused op against its CPU twin
// (the composition of the operations, within float rounding), and against the GPU's own operations one by
// one (Backend's defaults on the same object), bit for bit: Q and K, and the attention over what the
// store wrote (the cache rows are first overwritten with other values, so a store that wrote nothing
// fails), for passes of 5, 1 and 3 tokens; norm_add and matmul_norm_add for 1 and 5 tokens.
TEST_CASE("block ops: Q/K norm + RoPE + KV store; post-norm + add; product + post-norm + add: fused = unfused to the bit and GPU = CPU", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  const Shape shape = GENERATE(Shape::kLlama, Shape::kGemma3, Shape::kGptOss);  // kNorm pairs; Q/K norms; YaRN
  CAPTURE(int(shape));
  Twins t(llm::test::make_tiny(shape, GgmlType::F16));
  const LayerWeights& l = t.m.w.layers[1];
  const TensorRef none, &qn = t.m.c.qk_norm ? l.q_norm : none, &kn = t.m.c.qk_norm ? l.k_norm : none;
  const RopeParams rope = rope_params(t.m.c, t.m.c.rope_base);
  const AttnParams attn{1, 0, {}};
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    for (float v : b) REQUIRE(!std::isnan(v));
    REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  };
  for (auto [pos0, n] : {std::pair{0u, 5u}, std::pair{5u, 1u}, std::pair{6u, 3u}}) {
    CAPTURE(pos0, n);
    t.pass(pos0, n);
    t.random(Act::kQ, n);
    t.random(Act::kK, n);
    t.random(Act::kV, n);
    const std::vector<float> q0 = t.cpu.read(Act::kQ), k0 = t.cpu.read(Act::kK), v0 = t.cpu.read(Act::kV);
    // The GPU's result one way: other rows into the cache at the pass's places first, then the inputs back.
    auto gpu_run = [&](bool fused) {
      t.random(Act::kK, n);
      t.random(Act::kV, n);
      t.gpu.store_kv(1);
      t.gpu.write(Act::kQ, q0), t.gpu.write(Act::kK, k0), t.gpu.write(Act::kV, v0);
      if (fused) t.gpu.rope_store_kv(qn, kn, rope, 1);
      else t.gpu.Backend::rope_store_kv(qn, kn, rope, 1);
      t.gpu.write(Act::kAtt, std::vector<float>(n * t.width(Act::kAtt), NAN));
      t.gpu.attend(attn);
      return std::array{t.gpu.read(Act::kQ), t.gpu.read(Act::kK), t.gpu.read(Act::kAtt)};
    };
    const auto unfused = gpu_run(false), fused = gpu_run(true);
    for (size_t i = 0; i < 3; ++i) same(fused[i], unfused[i]);
    t.cpu.write(Act::kQ, q0), t.cpu.write(Act::kK, k0), t.cpu.write(Act::kV, v0);
    t.cpu.rope_store_kv(qn, kn, rope, 1);
    t.cpu.attend(attn);
    t.expect_close(Act::kQ, 1e-4f);
    t.expect_close(Act::kK, 1e-4f);
    t.expect_close(Act::kAtt, 1e-4f);
  }
  for (uint32_t n : {1u, 5u}) {
    CAPTURE(n);
    t.pass(0, n);
    t.random(Act::kX, n);
    t.random(Act::kTmp, n);
    const std::vector<float> x0 = t.gpu.read(Act::kX), y0 = t.gpu.read(Act::kTmp);
    t.gpu.Backend::norm_add(Act::kTmp, l.ffn_norm, Act::kX);
    const std::vector<float> unfused = t.gpu.read(Act::kX);
    t.gpu.write(Act::kX, x0), t.gpu.write(Act::kTmp, y0);
    t.gpu.norm_add(Act::kTmp, l.ffn_norm, Act::kX);
    same(t.gpu.read(Act::kX), unfused);
    t.cpu.norm_add(Act::kTmp, l.ffn_norm, Act::kX);
    t.expect_close(Act::kX, 1e-5f);
  }
  // A product, its post-norm and the add (one token: one launch whose last block adds; several: apart),
  // for O (with its bias where present) and down (a dense FFN's: gpt-oss's layers have routed experts
  // only); one token twice in a row (the launch's counter of finished blocks must be back at 0 for the second).
  const TensorRef& post = t.m.c.post_norms ? l.post_attn_norm : l.ffn_norm;
  struct Prod { const TensorRef& w; const TensorRef& bias; Act in; };
  for (const Prod& p : {Prod{l.wo, l.bo, Act::kAtt}, Prod{l.down, none, Act::kGate}})
    for (uint32_t n : {1u, 1u, 5u}) {
      if (!p.w.present) continue;
      CAPTURE(n, int(p.in));
      t.pass(0, n);
      t.random(Act::kX, n);
      t.random(p.in, n);
      const std::vector<float> x0 = t.gpu.read(Act::kX);
      t.gpu.Backend::matmul_norm_add(p.w, p.bias, p.in, post, Act::kX);
      const std::vector<float> unfused = t.gpu.read(Act::kX);
      t.gpu.write(Act::kX, x0);
      t.gpu.write(Act::kTmp, std::vector<float>(n * t.width(Act::kTmp), NAN));
      t.gpu.matmul_norm_add(p.w, p.bias, p.in, post, Act::kX);
      same(t.gpu.read(Act::kX), unfused);
      t.cpu.matmul_norm_add(p.w, p.bias, p.in, post, Act::kX);
      t.expect_close(Act::kX, 1e-4f);
    }
}

// A one-token pass's Q/K norms, RoPE and KV store in its attention's launch (rope_store_attend, issue 36)
// against the operations one by one: two identical GPU backends (the same model and random inputs), one
// fused and one not, over a 5-token pass (not fused) and then one token at a time at positions 5..9 on
// windowed and global layers: Q and the attention to the bit at every step, and each step attends to the
// cache rows the earlier fused steps stored (a store that wrote nothing, or other values, fails later);
// the fused side against its CPU twin within float rounding.
TEST_CASE("block ops: one token's Q/K norm + RoPE + KV store fused into attention: fused = unfused to the bit and GPU = CPU", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  const Shape shape = GENERATE(Shape::kLlama, Shape::kGemma3, Shape::kGptOss);  // kNorm pairs; Q/K norms and GQA; YaRN and sinks
  const uint32_t window = GENERATE(0u, 3u);
  CAPTURE(int(shape), window);
  Twins ref(llm::test::make_tiny(shape, GgmlType::F16)), t(llm::test::make_tiny(shape, GgmlType::F16));
  const LayerWeights& l = t.m.w.layers[1];
  const TensorRef none, &qn = t.m.c.qk_norm ? l.q_norm : none, &kn = t.m.c.qk_norm ? l.k_norm : none;
  const RopeParams rope = rope_params(t.m.c, t.m.c.rope_base);
  const AttnParams attn{1, window, l.sinks};
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    for (float v : b) REQUIRE(!std::isnan(v));
    REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  };
  for (auto [pos0, n] : {std::pair{0u, 5u}, std::pair{5u, 1u}, std::pair{6u, 1u}, std::pair{7u, 1u}, std::pair{8u, 1u}, std::pair{9u, 1u}}) {
    CAPTURE(pos0, n);
    for (Twins* w : {&ref, &t}) {  // the same random inputs on both (their generators start alike)
      w->pass(pos0, n);
      for (Act a : {Act::kQ, Act::kK, Act::kV}) w->random(a, n);
      w->poison(Act::kAtt, n);
    }
    ref.gpu.Backend::rope_store_attend(qn, kn, rope, attn);
    t.gpu.rope_store_attend(qn, kn, rope, attn);
    same(t.gpu.read(Act::kQ), ref.gpu.read(Act::kQ));
    same(t.gpu.read(Act::kAtt), ref.gpu.read(Act::kAtt));
    t.cpu.rope_store_attend(qn, kn, rope, attn);
    t.expect_close(Act::kAtt, 1e-4f);
  }
}

// The small passes' attention split along the positions (compute/gpu_attention_decode.cuh): a token's
// output depends only on how many positions it sees, so a speculative pass of k tokens gives each token
// the bits of its own one-token pass. Tokens at positions 250..256 (2 or 3 chunks of 128 positions, merged
// by the last block) in one pass (Q/K norms, RoPE, the store, then attention), then one at a time (the
// fused one-token launch) on the same inputs: Q and the attention to the bit, and within float rounding
// of the CPU's; GQA, Q/K norms, sinks, a window of 100 and none; the positions before on a prompt's passes.
TEST_CASE("block ops: a token's split attention in a k-token pass has its one-token pass's bits and GPU = CPU", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  const Shape shape = GENERATE(Shape::kLlama, Shape::kGemma3, Shape::kGptOss);
  const uint32_t window = GENERATE(0u, 100u);
  CAPTURE(int(shape), window);
  constexpr uint32_t kPos = 250, kK = 7;
  Twins t(llm::test::make_tiny(shape, GgmlType::F16), 320, 64);
  const LayerWeights& l = t.m.w.layers[1];
  const TensorRef none, &qn = t.m.c.qk_norm ? l.q_norm : none, &kn = t.m.c.qk_norm ? l.k_norm : none;
  const RopeParams rope = rope_params(t.m.c, t.m.c.rope_base);
  const AttnParams attn{1, window, l.sinks};
  for (uint32_t p0 = 0; p0 < kPos; p0 += 50) {  // the cache before the pass
    t.pass(p0, 50);
    t.random(Act::kK, 50);
    t.random(Act::kV, 50);
    for (Backend* b : t.both) b->store_kv(1);
  }
  std::vector<float> in[3];  // the k tokens' Q, K and V as the products wrote them
  const Act acts[3] = {Act::kQ, Act::kK, Act::kV};
  std::normal_distribution<float> d;
  t.pass(kPos, kK);
  for (int i = 0; i < 3; ++i) {
    in[i].resize(kK * t.width(acts[i]));
    for (float& x : in[i]) x = d(t.rng);
    for (Backend* b : t.both) b->write(acts[i], in[i]);
  }
  t.poison(Act::kAtt, kK);
  for (Backend* b : t.both) b->rope_store_attend(qn, kn, rope, attn);
  t.expect_close(Act::kAtt, 1e-4f);
  const std::vector<float> q_pass = t.gpu.read(Act::kQ), att_pass = t.gpu.read(Act::kAtt);
  for (float v : att_pass) REQUIRE(!std::isnan(v));
  for (uint32_t k = 0; k < kK; ++k) {
    CAPTURE(k);
    t.pass(kPos + k, 1);
    for (int i = 0; i < 3; ++i) {
      const size_t w = t.width(acts[i]);
      const std::vector<float> row(in[i].begin() + k * w, in[i].begin() + (k + 1) * w);
      for (Backend* b : t.both) b->write(acts[i], row);
    }
    t.poison(Act::kAtt, 1);
    for (Backend* b : t.both) b->rope_store_attend(qn, kn, rope, attn);
    const std::vector<float> q = t.gpu.read(Act::kQ), att = t.gpu.read(Act::kAtt);
    REQUIRE(std::memcmp(q.data(), q_pass.data() + k * q.size(), q.size() * sizeof(float)) == 0);
    REQUIRE(std::memcmp(att.data(), att_pass.data() + k * att.size(), att.size() * sizeof(float)) == 0);
    t.expect_close(Act::kAtt, 1e-4f);
  }
}

TEST_CASE("block ops: every matrix of a layer (matrix-vector, batched, with and without bias), GPU = CPU", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  const GgmlType type = GENERATE(from_range(kTypes));
  const Shape shape = GENERATE(Shape::kLlama, Shape::kQwen2);  // qwen2: Q, K and V biases
  CAPTURE(gguf::ggml_type_name(uint32_t(type)), int(shape));
  Twins t(llm::test::make_tiny(shape, type));
  const LayerWeights& l = t.m.w.layers[1];
  const TensorRef none;
  struct Mat { const TensorRef& w; const TensorRef& bias; Act in, out; };
  const Mat mats[] = {{l.wq, l.bq, Act::kXn, Act::kQ},     {l.wk, l.bk, Act::kXn, Act::kK},       {l.wv, l.bv, Act::kXn, Act::kV},
                      {l.wo, none, Act::kAtt, Act::kTmp},  {l.gate, none, Act::kXn, Act::kGate},  {l.up, none, Act::kXn, Act::kUp},
                      {l.down, none, Act::kGate, Act::kTmp}};
  for (uint32_t n : {1u, 3u, 8u}) {  // 1: the matrix-vector kernel; more: the batched kernel
    t.pass(0, n);
    for (const Mat& mat : mats) {
      CAPTURE(n, int(mat.out), mat.bias.present);
      t.random(mat.in, n);
      t.poison(mat.out, n);
      for (Backend* b : t.both) b->matmul(mat.w, mat.bias, mat.in, mat.out);
      t.expect_close(mat.out, 1e-4f);
    }
  }
}

TEST_CASE("block ops: per-head Q/K norm and RoPE, both layouts, partial rotary, YaRN, GPU = CPU", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  // llama: kNorm pairs; qwen2: kNeox; gemma3: kNeox + Q/K norms; gpt-oss: kNeox, YaRN (factor 32 over 4096)
  struct Case { Shape shape; uint32_t n_rot; };
  const Case c = GENERATE(Case{Shape::kLlama, 64}, Case{Shape::kQwen2, 64}, Case{Shape::kGemma3, 64},
                          Case{Shape::kGemma3, 32}, Case{Shape::kLlama, 32}, Case{Shape::kGptOss, 64});
  CAPTURE(int(c.shape), c.n_rot);
  llm::test::TinyModel m = llm::test::make_tiny(c.shape, GgmlType::F16);
  m.c.n_rot = c.n_rot;
  Twins t(std::move(m));
  const LayerWeights& l = t.m.w.layers[0];
  const RopeParams rope = rope_params(t.m.c, t.m.c.rope_base);
  for (uint32_t pos0 : {0u, 17u}) {
    t.pass(pos0, 6);
    for (Act a : {Act::kQ, Act::kK}) {
      CAPTURE(pos0, int(a));
      const TensorRef none, &norm = t.m.c.qk_norm ? (a == Act::kQ ? l.q_norm : l.k_norm) : none;
      t.random(a, 6);
      for (Backend* b : t.both) b->head_norm_rope(a, norm, rope);
      t.expect_close(a, 1e-4f);
    }
  }
}

TEST_CASE("block ops: KV store and attention, causal in a pass, sliding window, GPU = CPU", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  const uint32_t window = GENERATE(0u, 5u, 1u);
  CAPTURE(window);
  Twins t(llm::test::make_tiny(Shape::kGemma3, GgmlType::F16));  // GQA: 4 query heads over 2 KV heads
  attend_three_passes(t, {1, window, {}});
}

// The bound of the tensor-core flash kernel (compute/gpu_flash_mma.cu) against the CPU, which rounds
// only K and V to FP16 (as the cache on both does). With u = 2^-11 (FP16's rounding, to nearest), for
// one query of one head over its visible positions j:
//  - Q is scaled and rounded to FP16: a score s_j = sum_d q_d k_jd moves by at most
//    E_j = u * scale * sum_d |q_d k_jd| + 2^-25 * sum_d |k_jd| (the second term: FP16 subnormals below 2^-14);
//  - P = exp(s - max) is rounded to FP16 (u relative, 2^-25 absolute below 2^-14; the exponential itself
//    is ex2.approx, 2^-21 relative), and the sum is of the rounded P, so the output is a convex
//    combination of V rows (a sink only adds to the denominator) whose weights w_j carry relative errors
//    eta_j, |eta_j| <= (1 + u + 2^-21) e^E - 1 <= eta = 1.01 (u + 2^-21 + max_j E_j) for the E here; so
//    each output dimension d moves by at most sum_j w_j |eta_j - mean eta| |v_jd| <= 2.1 eta sum_j w_j |v_jd|
//    (2.1: 2 over 1 - eta), plus the subnormal P's 2^-25 max_j |v_jd| per position over a denominator
//    >= 1 (the maximum's own P is exactly 1);
//  - the FP32 sums in another order: 1e-4 of the largest output, as everywhere in this file.
// The weights w_j here are the softmax in double without the sink (which only shrinks them): an upper
// bound. Random data sit at 2-10% of it; a position in or out of the window by one moves an output by
// about w_j |v_j - o|, several times the bound.
static void expect_within_fp16_bound(Twins& t, const AttnParams& p, uint32_t pos0, uint32_t n, const std::vector<float>& k,
                                     const std::vector<float>& v) {
  const ModelConfig& c = t.m.c;
  const uint32_t D = c.head_dim, QD = c.q_dim(), KV = c.kv_dim(), group = c.n_head / c.n_head_kv;
  const std::vector<float> q = t.cpu.read(Act::kQ), cpu = t.cpu.read(Act::kAtt), gpu = t.gpu.read(Act::kAtt);
  double omax = 0.0, worst = 0.0;
  for (float x : cpu) omax = std::max(omax, double(std::fabs(x)));
  REQUIRE(omax > 0.0);
  const double u = std::ldexp(1.0, -11), sub = std::ldexp(1.0, -25);
  size_t nonfinite = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t pos = pos0 + i, first = p.window && pos + 1 > p.window ? pos + 1 - p.window : 0;
    for (uint32_t h = 0; h < c.n_head; ++h) {
      const float* qh = &q[(uint64_t(i) * c.n_head + h) * D];
      std::vector<double> w(pos + 1 - first);
      double e = 0.0, mx = -INFINITY, sum = 0.0;
      for (uint32_t j = first; j <= pos; ++j) {
        const float* kh = &k[uint64_t(j) * KV + (h / group) * D];
        double dot = 0.0, qk = 0.0, ka = 0.0;
        for (uint32_t d = 0; d < D; ++d) dot += double(qh[d]) * kh[d], qk += std::fabs(double(qh[d]) * kh[d]), ka += std::fabs(kh[d]);
        w[j - first] = dot * c.attn_scale, mx = std::max(mx, w[j - first]);
        e = std::max(e, u * c.attn_scale * qk + sub * ka);
      }
      for (double& x : w) x = std::exp(x - mx), sum += x;
      const double eta = 1.01 * (u + std::ldexp(1.0, -21) + e);
      for (uint32_t d = 0; d < D; ++d) {
        double wv = 0.0, vmax = 0.0;
        for (uint32_t j = first; j <= pos; ++j) {
          const double vd = std::fabs(v[uint64_t(j) * KV + (h / group) * D + d]);
          wv += w[j - first] / sum * vd, vmax = std::max(vmax, vd);
        }
        const double bound = 2.1 * eta * wv + double(w.size()) * sub * vmax + 1e-4 * omax;
        const uint64_t at = (uint64_t(i) * c.n_head + h) * D + d;
        if (!std::isfinite(gpu[at])) ++nonfinite;
        else worst = std::max(worst, std::fabs(double(gpu[at]) - cpu[at]) / bound);
      }
    }
  }
  CAPTURE(worst, omax);
  REQUIRE(nonfinite == 0);
  CHECK(worst <= 1.0);  // worst: the largest difference as a fraction of its own bound
}

// Passes of more than 32 tokens take the flash kernel: on the tensor cores (compute/gpu_flash_mma.cu) for
// heads of 64, 128 and 256 dimensions (gpt-oss, Llama, Gemma 3), the FP32 kernel
// (compute/gpu_flash_attention.cuh) for others (96 here). GPU = CPU within expect_within_fp16_bound,
// causal across the tiles of positions, windows shorter and longer than a tile, with and without sinks;
// a pass of 33 after one of 100, then a single token (the small path) over the cache the long passes wrote.
TEST_CASE("block ops: attention of long passes (flash kernel), sliding window, sinks, GPU = CPU", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  const uint32_t window = GENERATE(0u, 5u, 40u);
  const bool sinks = GENERATE(false, true);
  const uint32_t head_dim = GENERATE(64u, 96u, 128u, 256u);
  CAPTURE(window, sinks, head_dim);
  llm::test::TinyModel m = llm::test::make_tiny(sinks ? Shape::kGptOss : Shape::kGemma3, GgmlType::F16);
  m.c.head_dim = m.c.n_rot = head_dim;  // attention reads only the Q, K and V written here, no weights
  m.c.attn_scale = 1.0f / std::sqrt(float(head_dim));
  Twins t(std::move(m), 160, 100);
  const AttnParams p{1, window, sinks ? t.m.w.layers[1].sinks : TensorRef{}};
  std::vector<float> k_all, v_all;  // every position's K and V so far
  for (auto [pos0, n] : Passes{{0u, 100u}, {100u, 33u}, {133u, 1u}}) {
    CAPTURE(pos0, n);
    attend_pass(t, p, pos0, n);
    for (auto [a, all] : {std::pair{Act::kK, &k_all}, std::pair{Act::kV, &v_all}}) {
      const std::vector<float> x = t.cpu.read(a);
      all->insert(all->end(), x.begin(), x.end());
    }
    expect_within_fp16_bound(t, p, pos0, n, k_all, v_all);
  }
}

// gpt-oss's attention sinks: each head's softmax has its sink logit beside the scores (sinks uniform in
// [-1, 1], and scaled by 4 so that a sink dominates some heads), on windowed and global layers.
TEST_CASE("block ops: attention with sinks (gpt-oss), sliding window, GPU = CPU", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  const uint32_t window = GENERATE(0u, 5u);
  const float sink_scale = GENERATE(1.0f, 4.0f);
  CAPTURE(window, sink_scale);
  llm::test::TinyModel m = llm::test::make_tiny(Shape::kGptOss, GgmlType::F16);
  const TensorRef& sinks = m.w.layers[1].sinks;
  for (uint32_t h = 0; h < m.c.n_head; ++h) {
    float f;
    std::memcpy(&f, &m.bytes[sinks.file_offset + 4 * h], 4);
    f *= sink_scale;
    std::memcpy(&m.bytes[sinks.file_offset + 4 * h], &f, 4);
  }
  Twins t(std::move(m));
  attend_three_passes(t, {1, window, t.m.w.layers[1].sinks});
}

TEST_CASE("block ops: the FFN's GLU (SiLU, GELU, gpt-oss's clamped SwiGLU), GPU = CPU", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  const FfnAct a = GENERATE(FfnAct::kSilu, FfnAct::kGelu, FfnAct::kSwigluOai);
  Twins t(llm::test::make_tiny(Shape::kLlama, GgmlType::F16));
  t.pass(0, 3);
  t.random(Act::kGate, 3);
  t.random(Act::kUp, 3);
  if (a == FfnAct::kSwigluOai) {  // values across the limit (7) on both sides, so the clamps act
    std::vector<float> g = t.cpu.read(Act::kGate), u = t.cpu.read(Act::kUp);
    for (size_t i = 0; i < g.size(); ++i) g[i] *= 6.0f, u[i] *= 6.0f;
    for (Backend* b : t.both) b->write(Act::kGate, g), b->write(Act::kUp, u);
  }
  for (Backend* b : t.both) b->glu(Act::kGate, Act::kUp, a);
  t.expect_close(Act::kGate, 1e-5f);
}

TEST_CASE("block ops: MoE (routing, the experts' GLU, the weighted sum), GPU = CPU", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  const GgmlType type = GENERATE(GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4);
  // gpt-oss: softmax over the selected logits, router and expert biases, the clamped SwiGLU
  const Shape shape = GENERATE(Shape::kMoe, Shape::kGptOss);
  CAPTURE(gguf::ggml_type_name(uint32_t(type)), int(shape));
  Twins t(llm::test::make_tiny(shape, type));  // 4 experts, top 2
  for (uint32_t n : {1u, 4u}) {  // the GPU backend routes a pass's tokens one by one, the CPU groups them by expert
    CAPTURE(n);
    t.pass(0, n);
    t.random(Act::kXn, n);
    t.poison(Act::kTmp, n);
    for (Backend* b : t.both) b->moe(t.m.w.layers[0], Act::kXn, Act::kTmp);
    t.expect_close(Act::kTmp, 5e-4f);
  }
}

// One token's norm, MoE and residual add in three launches (gpu_moe_token.h): the router's rows with
// the routing in its last block, the selected experts' gate/up with the GLU, their down rows with the
// weighted sum and the add (a warp per output row). The same x through the operations apart (Backend's
// norm_moe_add: the norm, moe and add kernels) must give the same x to the bit, and the CPU's within
// float rounding; three tokens in a row, so the router launch's counter is seen back at 0. With 8-bit x
// (every type on; the router is F32) the experts' launches take it: fused = unfused still, to the bit.
TEST_CASE("block ops: one token's norm + MoE + add in three launches: fused = unfused to the bit, GPU = CPU", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  const GgmlType type = GENERATE(GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4);
  const Shape shape = GENERATE(Shape::kMoe, Shape::kGptOss);
  const uint32_t q8 = GENERATE(0u, kAllQ8Types);
  CAPTURE(gguf::ggml_type_name(uint32_t(type)), int(shape), q8);
  Twins t(llm::test::make_tiny(shape, type), kCtx, 8, q8);
  const LayerWeights& l = t.m.w.layers[0];
  for (uint32_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    t.pass(i, 1);
    t.random(Act::kX, 1);
    const std::vector<float> x = t.gpu.read(Act::kX);
    const uint64_t fused_before = t.gpu.fused_moe_layers();
    t.gpu.norm_moe_add(l.ffn_norm, l, Act::kX);
    REQUIRE(t.gpu.fused_moe_layers() == fused_before + 1);  // the fused launches ran, not the fallback
    const std::vector<float> fused = t.gpu.read(Act::kX);
    t.gpu.write(Act::kX, x);
    t.gpu.Backend::norm_moe_add(l.ffn_norm, l, Act::kX);
    const std::vector<float> apart = t.gpu.read(Act::kX);
    CHECK(std::memcmp(fused.data(), apart.data(), fused.size() * sizeof(float)) == 0);
    t.cpu.norm_moe_add(l.ffn_norm, l, Act::kX);
    if (q8 == 0) t.expect_close(Act::kX, 5e-4f);
  }
}

// A pass of more than kSmallPassTokens tokens over experts in VRAM takes the grouped path
// (gpu_moe_grouped.h): one routing for the pass, each expert's tokens in one product, a sum per token in
// its routing order. With the tensor cores switched off (GPUNVME_MOE_MMA=0, the A/B switch) its outputs
// must be the token path's to the bit (the same 100 tokens in passes of 25, which route token by token)
// and the CPU's within float rounding.
TEST_CASE("block ops: a prompt pass's MoE with the experts grouped, the token path's bits, GPU = CPU", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  const GgmlType type = GENERATE(GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4);
  const Shape shape = GENERATE(Shape::kMoe, Shape::kGptOss);
  const uint32_t q8 = GENERATE(0u, kAllQ8Types);  // and with 8-bit x: grouped = token path still, to the bit
  CAPTURE(gguf::ggml_type_name(uint32_t(type)), int(shape), q8);
  constexpr uint32_t n = 100, part = 25;
  struct Unset {
    ~Unset() { ::unsetenv("GPUNVME_MOE_MMA"); }
  } unset;
  ::setenv("GPUNVME_MOE_MMA", "0", 1);  // read when the GPU forward pass is made
  Twins t(llm::test::make_tiny(shape, type), 128, 128, q8);  // 4 experts, top 2
  t.pass(0, n);
  t.random(Act::kXn, n);
  t.poison(Act::kTmp, n);
  for (Backend* b : t.both) b->moe(t.m.w.layers[0], Act::kXn, Act::kTmp);
  if (q8 == 0) t.expect_close(Act::kTmp, 5e-4f);
  const std::vector<float> x = t.gpu.read(Act::kXn), grouped = t.gpu.read(Act::kTmp);
  const size_t w = t.width(Act::kXn);
  for (uint32_t p0 = 0; p0 < n; p0 += part) {
    CAPTURE(p0);
    t.gpu.set_pass(p0, part);
    t.gpu.write(Act::kXn, std::vector<float>(x.begin() + p0 * w, x.begin() + (p0 + part) * w));
    t.gpu.moe(t.m.w.layers[0], Act::kXn, Act::kTmp);
    const std::vector<float> tokenwise = t.gpu.read(Act::kTmp);
    CHECK(std::memcmp(tokenwise.data(), grouped.data() + p0 * w, tokenwise.size() * sizeof(float)) == 0);
  }
}

// Layer 0's experts as the GPU expert fetcher hands them over, without a drive: a copy of them in a
// scratchpad of its own, laid out otherwise (the experts in reverse order, each one's down, up, gate),
// and a fetch's table naming each routing id's expert in reverse order too. fetch() reads the ids back
// and waits (a test's fake may), then writes the table.
class CopiedExperts final : public ExpertSource {
 public:
  explicit CopiedExperts(const llm::test::TinyModel& m) : l_(m.w.layers[0]), k_(m.c.n_expert_used) {
    const TensorRef* parts[3] = {&l_.down_exps, &l_.up_exps, &l_.gate_exps};
    std::vector<uint8_t> bytes;
    for (uint32_t e = m.c.n_expert; e-- > 0;)
      for (const TensorRef* t : parts) {
        offsets_.push_back(bytes.size());
        const uint8_t* at = m.bytes.data() + t->file_offset + e * t->mat_bytes();
        bytes.insert(bytes.end(), at, at + t->mat_bytes());
      }
    scratch_ = std::make_unique<DeviceBytes>(bytes);
    REQUIRE(cudaMalloc(&experts_, k_ * sizeof(stream::GpuFetchedExpert)) == cudaSuccess);
    REQUIRE(cudaMalloc(&selection_, k_ * sizeof(uint32_t)) == cudaSuccess);
    n_expert_ = m.c.n_expert;
  }
  ~CopiedExperts() override {
    cudaFree(experts_);
    cudaFree(selection_);
  }
  void fetch(uint32_t layer, const uint32_t* ids, uint32_t k, gpu_stream_t s) override {
    REQUIRE(layer == 0);
    REQUIRE(k <= k_);
    std::vector<uint32_t> id(k), sel(k);
    REQUIRE(cudaMemcpyAsync(id.data(), ids, k * sizeof(uint32_t), cudaMemcpyDeviceToHost, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    std::vector<stream::GpuFetchedExpert> ex(k);
    const model::Projection projs[3] = {model::Projection::kDown, model::Projection::kUp, model::Projection::kGate};
    const TensorRef* parts[3] = {&l_.down_exps, &l_.up_exps, &l_.gate_exps};
    for (uint32_t j = 0; j < k; ++j) {
      REQUIRE(id[j] < n_expert_);
      sel[j] = k - 1 - j;
      stream::GpuFetchedExpert& e = ex[sel[j]];
      e.expert = id[j];
      e.part_count = 3;
      for (uint32_t p = 0; p < 3; ++p) {
        e.part_proj[p] = uint32_t(projs[p]);
        e.part_offset[p] = offsets_[(n_expert_ - 1 - id[j]) * 3 + p];
        e.part_bytes[p] = parts[p]->mat_bytes();
      }
    }
    REQUIRE(cudaMemcpyAsync(experts_, ex.data(), k * sizeof(ex[0]), cudaMemcpyHostToDevice, s) == cudaSuccess);
    REQUIRE(cudaMemcpyAsync(selection_, sel.data(), k * sizeof(uint32_t), cudaMemcpyHostToDevice, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    ++fetches;
  }
  const uint8_t* scratch() const override { return scratch_->p; }
  const stream::GpuFetchedExpert* experts() const override { return experts_; }
  const uint32_t* selection() const override { return selection_; }
  uint32_t fetches = 0;

 private:
  const LayerWeights& l_;
  uint32_t k_, n_expert_ = 0;
  std::vector<uint64_t> offsets_;  // [slot][down, up, gate]
  std::unique_ptr<DeviceBytes> scratch_;
  stream::GpuFetchedExpert* experts_ = nullptr;
  uint32_t* selection_ = nullptr;
};

// With the fast kernels, a prompt pass's experts take the tensor cores (gpu_expert_mma.h): the CPU's
// outputs within what rounding the inputs to 16 bits explains (8 unit roundoffs of the output's largest
// magnitude; a wrong tile, row, scale or expert misses by the values themselves), and the same bits
// whether the experts were in VRAM or fetched (a fetch of K experts at a time, through CopiedExperts):
// the engine's resident = streamed. Passes of up to kSmallPassTokens keep the token path's bits, fetched
// or not.
TEST_CASE("block ops: a prompt pass's MoE on the tensor cores, GPU = CPU, fetched = resident to the bit", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  const GgmlType type = GENERATE(GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4);
  const Shape shape = GENERATE(Shape::kMoe, Shape::kGptOss);
  CAPTURE(gguf::ggml_type_name(uint32_t(type)), int(shape));
  constexpr uint32_t n = 100, part = 25;
  Twins t(llm::test::make_tiny(shape, type), 128, 128);  // 4 experts, top 2: 2 fetches of 2 per layer
  const LayerWeights& l = t.m.w.layers[0];
  t.pass(0, n);
  t.random(Act::kXn, n);
  t.poison(Act::kTmp, n);
  for (Backend* b : t.both) b->moe(l, Act::kXn, Act::kTmp);
  t.expect_close(Act::kTmp, 8 * float(gemm_unit_roundoff(gemm_elem_for(type))));
  const std::vector<float> x = t.gpu.read(Act::kXn), resident = t.gpu.read(Act::kTmp);
  CopiedExperts src(t.m);
  t.gpu.use_layer(WeightView{t.d.p, &t.whole}, &src);
  t.poison(Act::kTmp, n);
  t.gpu.moe(l, Act::kXn, Act::kTmp);
  CHECK(src.fetches == 2);
  CHECK(std::memcmp(t.gpu.read(Act::kTmp).data(), resident.data(), resident.size() * sizeof(float)) == 0);
  // Passes of 25: the token path, fetched (a fetch per token) and resident alike; not the prompt pass's bits.
  const size_t w = t.width(Act::kXn);
  bool differs = false;
  for (uint32_t p0 = 0; p0 < n; p0 += part) {
    CAPTURE(p0);
    t.gpu.set_pass(p0, part);
    t.gpu.write(Act::kXn, std::vector<float>(x.begin() + p0 * w, x.begin() + (p0 + part) * w));
    t.gpu.use_layer(WeightView{t.d.p, &t.whole}, &src);
    t.gpu.moe(l, Act::kXn, Act::kTmp);
    const std::vector<float> fetched = t.gpu.read(Act::kTmp);
    t.gpu.use_layer(WeightView{t.d.p, &t.whole});
    t.gpu.moe(l, Act::kXn, Act::kTmp);
    const std::vector<float> tokenwise = t.gpu.read(Act::kTmp);
    CHECK(std::memcmp(fetched.data(), tokenwise.data(), tokenwise.size() * sizeof(float)) == 0);
    differs = differs || std::memcmp(tokenwise.data(), resident.data() + p0 * w, tokenwise.size() * sizeof(float)) != 0;
  }
  CHECK(differs);  // the prompt pass did run on the tensor cores: 16-bit inputs leave some result's last bits
}

// GPUNVME_MOE_GROUP_FETCHED=1: a pass of 2..32 tokens (several sequences' decode) whose experts are
// fetched goes grouped on the small passes' kernels, each used expert fetched once for the pass (K at a time) and
// copied to a stage the batched kernel reads: the resident token path's bits, in 2 fetches where the
// token path made one per token. With 8-bit x (gpu_matmul.h) too: the batched 8-bit kernel, the selected
// experts' and the fetched experts' one-token 8-bit products.
TEST_CASE("block ops: a small pass's fetched experts grouped on the small passes' kernels, the token path's bits", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  const GgmlType type = GENERATE(GgmlType::F16, GgmlType::Q4_K, GgmlType::MXFP4, GgmlType::Q6_K, GgmlType::Q8_0);
  const Shape shape = GENERATE(Shape::kMoe, Shape::kGptOss);
  const uint32_t q8 = GENERATE(0u, kAllQ8Types);
  CAPTURE(gguf::ggml_type_name(uint32_t(type)), int(shape), q8);
  struct Unset {
    ~Unset() { ::unsetenv("GPUNVME_MOE_GROUP_FETCHED"); }
  } unset;
  ::setenv("GPUNVME_MOE_GROUP_FETCHED", "1", 1);  // read when the GPU forward pass is made
  constexpr uint32_t n = 25;
  Twins t(llm::test::make_tiny(shape, type), 64, 32, q8);  // 4 experts, top 2
  const LayerWeights& l = t.m.w.layers[0];
  t.pass(0, n);
  t.random(Act::kXn, n);
  t.poison(Act::kTmp, n);
  t.gpu.moe(l, Act::kXn, Act::kTmp);  // resident: token by token
  const std::vector<float> tokenwise = t.gpu.read(Act::kTmp);
  CopiedExperts src(t.m);
  t.gpu.use_layer(WeightView{t.d.p, &t.whole}, &src);
  t.poison(Act::kTmp, n);
  t.gpu.moe(l, Act::kXn, Act::kTmp);
  CHECK(src.fetches == 2);
  CHECK(std::memcmp(t.gpu.read(Act::kTmp).data(), tokenwise.data(), tokenwise.size() * sizeof(float)) == 0);
  t.gpu.set_pass(0, 1);  // one token: the token path, one fetch
  t.gpu.moe(l, Act::kXn, Act::kTmp);
  CHECK(src.fetches == 3);
  CHECK(std::memcmp(t.gpu.read(Act::kTmp).data(), tokenwise.data(), t.width(Act::kTmp) * sizeof(float)) == 0);
}

TEST_CASE("block: whole layers over two passes, every architecture rule, GPU = CPU", "[gpu][llm][ops]") {
  REQUIRE_GPU();
  const Shape shape = GENERATE(Shape::kLlama, Shape::kQwen2, Shape::kGemma3, Shape::kMoe, Shape::kGptOss);
  CAPTURE(int(shape));
  Twins t(llm::test::make_tiny(shape, GgmlType::Q8_0));
  for (auto [pos0, n] : {std::pair{0u, 7u}, std::pair{7u, 1u}}) {
    t.pass(pos0, n);
    t.random(Act::kX, n);
    for (const LayerWeights& l : t.m.w.layers) {
      CAPTURE(pos0, n, l.index);
      for (Backend* b : t.both) run_block(t.m.c, l, *b);
      t.expect_close(Act::kX, 1e-3f);
    }
  }
}
