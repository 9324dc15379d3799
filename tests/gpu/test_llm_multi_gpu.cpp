// Several GPUs of one host (issue 35, examples/llm/engine/multi_gpu_executor.h): the generated 3-layer
// models (llm_fixtures.h), dense and MoE, split over 2 GPUs (layers 0-1 on GPU 0, layer 2 and the head
// on GPU 1, the hidden state by NCCL) give the tokens and logits of one GPU to the bit: for one-token
// steps and for a batched pass of every row, with every layer resident, and with layers streamed and
// experts fetched on each GPU from its own queues. Skips without 2 GPUs (the lead's 2-GPU machine runs it).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <span>
#include <string>
#include <vector>

#include "examples/llm/compute/gpu_forward.h"
#include "examples/llm/engine/executor.h"
#include "device_array.h"
#include "gpu_rig.h"
#include "llm_fixtures.h"
#include "two_gpus.h"
#include "tests/llm/tiny_model.h"

using namespace gpunvme;

namespace {

using llm::test::same_bits;
using test::check_steps;

// A pass of 5 tokens at position 0, every row's logits.
std::vector<float> batched(host::Controller& c, const llm::ModelOnDevice& m, llm::GpuExecOptions o) {
  o.max_batch = 5;
  auto ex = llm::make_gpu_executor(c, m, 8, o);
  const std::vector<uint32_t> t{3, 17, 5, 200, 9};
  const std::span<const float> l = ex->pass(t, 0, true);
  std::vector<float> out(l.begin(), l.end());
  ex->finish();
  return out;
}

// The model's steps on the default GPU, every layer resident: what a case holds its GPUs' run to.
std::vector<std::vector<float>> resident_steps(const test::Opened& o, llm::ExecStats* stats) {
  llm::GpuExecOptions one;
  one.resident_layers = o.m.config.n_layer;
  return test::run(*o.ctrl, o.m, one, stats);
}

}  // namespace

TEST_CASE("llm --gpus 2: tokens and logits of one GPU to the bit, resident and streamed, dense and MoE") {
  REQUIRE_TWO_GPUS();
  for (const uint32_t experts : {0u, 8u}) {
    test::DeployedModel d(experts, "multi-gpu-test");
    test::Opened o(d.device);
    llm::GpuExecOptions one;
    one.resident_layers = o.m.config.n_layer;
    llm::ExecStats s1, s2;
    const auto want = test::run(*o.ctrl, o.m, one, &s1);
    const std::vector<float> want_batch = batched(*o.ctrl, o.m, one);
    // All resident; layer 0 resident and 1-2 streamed (one on each GPU; MoE: their experts fetched on each).
    for (const uint32_t resident : {o.m.config.n_layer, 1u}) {
      INFO("experts " << experts << ", --resident " << resident);
      llm::GpuExecOptions two = one;
      two.gpus = 2;
      two.resident_layers = resident;
      const auto got = test::run(*o.ctrl, o.m, two, &s2);
      check_steps(got, want);
      CHECK(same_bits(batched(*o.ctrl, o.m, two), want_batch));
      REQUIRE(s2.gpus.size() == 2);
      CHECK((s2.gpus[0].layers.begin == 0 && s2.gpus[0].layers.end == 2));
      CHECK((s2.gpus[1].layers.begin == 2 && s2.gpus[1].layers.end == 3));
      CHECK(s2.plan.layers.size() == o.m.config.n_layer);
      CHECK(s2.resident_layers == resident);
      CHECK(s2.streamed_layers == o.m.config.n_layer - resident);
      if (resident == 1) {
        CHECK(s2.gpus[1].plan.count(llm::Tier::kNvme) == 1);  // GPU 1 streamed its layer from its own queues
        CHECK(s2.streamed_bytes > 0);
        if (experts) CHECK(s2.has_experts);
      }
    }
    CHECK(std::string(std::getenv("NCCL_NVLS_ENABLE")) == "0");  // set before the communicators
  }
}

TEST_CASE("llm --gpus: more GPUs than CUDA sees, or than layers, is refused naming the fix") {
  REQUIRE_TWO_GPUS();
  test::DeployedModel d(0, "multi-gpu-test");
  test::Opened o(d.device);
  int n = 0;
  REQUIRE(cudaGetDeviceCount(&n) == cudaSuccess);
  llm::GpuExecOptions too_many;
  too_many.resident_layers = o.m.config.n_layer;
  too_many.gpus = uint32_t(n) + 1;
  // 3 layers: a fourth GPU would hold none (split_layers); with 2 GPUs visible, a third is not there.
  REQUIRE_THROWS_WITH(llm::make_gpu_executor(*o.ctrl, o.m, 8, too_many),
                      Catch::Matchers::ContainsSubstring("or fewer"));
}

// One GPU is enough: a GPU chosen by id runs where it is told, and an id CUDA does not see is refused.
TEST_CASE("llm --gpus device=0: one GPU by id gives the default GPU's logits to the bit and names itself", "[gpu][llm]") {
  REQUIRE_GPU();
  test::DeployedModel d(0, "multi-gpu-test");
  test::Opened o(d.device);
  llm::ExecStats s1, s2;
  const auto want = resident_steps(o, &s1);
  CHECK(s1.gpus.empty());  // the default GPU: the single-GPU report
  llm::GpuExecOptions by_id;
  by_id.resident_layers = o.m.config.n_layer;
  by_id.gpu_ids = {0};
  check_steps(test::run(*o.ctrl, o.m, by_id, &s2), want);
  REQUIRE(s2.gpus.size() == 1);
  CHECK(s2.gpus[0].gpu == 0);
  CHECK((s2.gpus[0].layers.begin == 0 && s2.gpus[0].layers.end == o.m.config.n_layer));
  CHECK(s2.gpus[0].plan.count(llm::Tier::kVram) == o.m.config.n_layer);
  int cur = -1;
  REQUIRE(cudaGetDevice(&cur) == cudaSuccess);
  CHECK(cur == 0);
}

TEST_CASE("llm --gpus: an id CUDA does not see is refused naming it and the count, before any GPU starts", "[gpu][llm]") {
  REQUIRE_GPU();
  test::DeployedModel d(0, "multi-gpu-test");
  test::Opened o(d.device);
  int n = 0;
  REQUIRE(cudaGetDeviceCount(&n) == cudaSuccess);
  const std::string sees = "CUDA sees " + std::to_string(n) + " GPU";
  llm::GpuExecOptions one;
  one.resident_layers = o.m.config.n_layer;
  one.gpu_ids = {n};
  REQUIRE_THROWS_WITH(llm::make_gpu_executor(*o.ctrl, o.m, 8, one),
                      Catch::Matchers::ContainsSubstring("--gpus device=" + std::to_string(n) + ": no GPU " + std::to_string(n) + ": " + sees));
  llm::GpuExecOptions two = one;
  two.gpus = 2;
  two.gpu_ids = {0, n};
  REQUIRE_THROWS_WITH(llm::make_gpu_executor(*o.ctrl, o.m, 8, two),
                      Catch::Matchers::ContainsSubstring("--gpus 0," + std::to_string(n) + ": no GPU " + std::to_string(n) + ": " + sees));
  llm::GpuExecOptions count = one;
  count.gpu_ids.clear();
  count.gpus = uint32_t(n) + 1;
  REQUIRE_THROWS_WITH(llm::make_gpu_executor(*o.ctrl, o.m, 8, count),
                      Catch::Matchers::ContainsSubstring("use --gpus " + std::to_string(n) + " or fewer"));
}

TEST_CASE("llm --gpus 2: a refused pass changes nothing, and the GPUs go on to one GPU's logits") {
  REQUIRE_TWO_GPUS();
  test::DeployedModel d(0, "multi-gpu-test");
  test::Opened o(d.device);
  llm::GpuExecOptions one;
  one.resident_layers = 1;  // GPU 1's layer streamed: its reads run ahead across the refusals
  llm::ExecStats s;
  const auto want = test::run(*o.ctrl, o.m, one, &s);
  llm::GpuExecOptions two = one;
  two.gpus = 2;
  auto ex = llm::make_gpu_executor(*o.ctrl, o.m, 8, two);
  // Each of these, refused by GPU 0 alone, would leave GPU 1 waiting for a hidden state.
  CHECK_THROWS_WITH(ex->step(o.m.config.n_vocab, 0), Catch::Matchers::ContainsSubstring("outside the vocabulary"));
  CHECK_THROWS_WITH(ex->step(3, 8), Catch::Matchers::ContainsSubstring("past the context"));
  const std::vector<uint32_t> two_tokens{3, 4};
  CHECK_THROWS_WITH(ex->pass(two_tokens, 0, true), Catch::Matchers::ContainsSubstring("takes 1..1"));
  uint32_t tok = 3;
  for (uint32_t pos = 0; pos < want.size(); ++pos) {
    INFO("step " << pos);
    CHECK(same_bits(ex->step(tok, pos), want[pos]));
    tok = uint32_t(std::max_element(want[pos].begin(), want[pos].end()) - want[pos].begin());
  }
  ex->finish();
}

TEST_CASE("llm --gpus 2 --vram-budget 0,1G: the split by the budgets, each GPU's budget, one GPU's logits to the bit") {
  REQUIRE_TWO_GPUS();
  for (const uint32_t experts : {0u, 8u}) {
    INFO("experts " << experts);
    test::DeployedModel d(experts, "multi-gpu-test");
    test::Opened o(d.device);
    llm::GpuExecOptions one;
    one.resident_layers = o.m.config.n_layer;
    llm::ExecStats s1, s2;
    const auto want = test::run(*o.ctrl, o.m, one, &s1);
    llm::GpuExecOptions two;
    two.gpus = 2;
    // GPU 0's budget holds only the KV cache of the one layer it gets (run()'s 8 positions): no layer.
    const uint64_t kv0 = llm::kv_cache_bytes(o.m.config, llm::KvCacheShape{0, 1, 1, false}, 8);
    two.vram_budgets = {kv0, 1ull << 30};
    // GPU 0 streams whatever it holds, GPU 1 holds everything: the fewest bytes per token on the
    // busiest GPU is one layer on GPU 0 (streamed), two on GPU 1 (in VRAM), not the even split's 2 + 1.
    const auto got = test::run(*o.ctrl, o.m, two, &s2);
    check_steps(got, want);
    REQUIRE(s2.gpus.size() == 2);
    CHECK((s2.gpus[0].layers.begin == 0 && s2.gpus[0].layers.end == 1));
    CHECK((s2.gpus[1].layers.begin == 1 && s2.gpus[1].layers.end == 3));
    CHECK(s2.gpus[0].vram_budget == kv0);
    CHECK(s2.gpus[0].plan.kv.bytes == kv0);
    CHECK(s2.gpus[1].vram_budget == 1ull << 30);
    CHECK(s2.gpus[0].plan.count(llm::Tier::kNvme) == 1);
    CHECK(s2.gpus[1].plan.count(llm::Tier::kVram) == 2);
    CHECK(s2.streamed_bytes > 0);
    // A list of another length than --gpus is refused before any GPU starts.
    two.vram_budgets = {1, 2, 3};
    REQUIRE_THROWS_WITH(llm::make_gpu_executor(*o.ctrl, o.m, 8, two), Catch::Matchers::ContainsSubstring("has 3 values for --gpus 2"));
  }
}

// One GPU is enough: the KV cache of a range holds that range's layers alone, and a layer outside it is
// refused instead of written past the cache.
TEST_CASE("GpuForward: the KV cache of layers [1, 2) is one layer's, and layer 0's store is refused", "[gpu][llm]") {
  REQUIRE_GPU();
  const llm::test::TinyModel m = llm::test::make_tiny(llm::test::Shape::kLlama, gguf::GgmlType::Q8_0);
  REQUIRE(m.c.n_layer == 2);
  gpunvme::test::DeviceArray<uint8_t> d(m.bytes);
  auto at = [&](const llm::TensorRef& t) { return d.p + t.file_offset; };
  const llm::GlobalWeights g{at(m.w.token_embd), at(m.w.output_norm), at(m.w.output)};
  const uint32_t n_ctx = 32;
  llm::GpuForward all(m.c, m.w, n_ctx, g, nullptr, 1);
  llm::GpuForward part(m.c, m.w, n_ctx, g, nullptr, 1, true, llm::KvCacheShape{1, 2});
  CHECK(all.device_bytes() - part.device_bytes() == uint64_t(n_ctx) * m.c.kv_dim() * 2 /* K and V */ * 2 /* halves */);
  part.set_pass(0, 1);
  part.store_kv(1);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK_THROWS_AS(part.store_kv(0), std::logic_error);
  CHECK_THROWS_AS(llm::GpuForward(m.c, m.w, n_ctx, g, nullptr, 1, true, llm::KvCacheShape{2, 2}), std::invalid_argument);
}

TEST_CASE("llm --gpus 2, a namespace per GPU: each GPU streams from its own copy, one GPU's logits to the bit") {
  REQUIRE_TWO_GPUS();
  for (const uint32_t experts : {0u, 8u}) {
    INFO("experts " << experts);
    test::DeployedModel a(experts, "multi-gpu-test"), b(experts, "multi-gpu-test");
    test::Opened oa(a.device), ob(b.device);
    llm::GpuExecOptions one;
    one.resident_layers = oa.m.config.n_layer;
    llm::ExecStats s1, s2;
    const auto want = test::run(*oa.ctrl, oa.m, one, &s1);
    llm::GpuExecOptions two;
    two.gpus = 2;
    two.resident_layers = 1;  // layer 1 streamed by GPU 0 from a, layer 2 by GPU 1 from b
    two.gpu_controllers = {{oa.ctrl.get()}, {ob.ctrl.get()}};
    const auto got = test::run(*oa.ctrl, oa.m, two, &s2);
    check_steps(got, want);
    REQUIRE(s2.gpus.size() == 2);
    CHECK(s2.gpus[0].device == oa.ctrl->transport().name());
    CHECK(s2.gpus[1].device == ob.ctrl->transport().name());
    CHECK(s2.gpus[0].device != s2.gpus[1].device);
    CHECK((s2.gpus[0].plan.count(llm::Tier::kNvme) == 1 && s2.gpus[1].plan.count(llm::Tier::kNvme) == 1));
    CHECK(s2.streamed_bytes > 0);
    two.gpu_controllers = {{oa.ctrl.get()}};
    REQUIRE_THROWS_WITH(llm::make_gpu_executor(*oa.ctrl, oa.m, 8, two), Catch::Matchers::ContainsSubstring("give one per GPU"));
  }
}

TEST_CASE("llm --gpus 1,0 without budgets: the split by each GPU's free memory, in the listed order, one GPU's logits") {
  REQUIRE_TWO_GPUS();
  test::DeployedModel d(0, "multi-gpu-test");
  test::Opened o(d.device);
  llm::ExecStats s1, s2;
  const auto want = resident_steps(o, &s1);
  llm::GpuExecOptions two;  // no --vram-budget, no --resident: each GPU's range by what it has free
  two.gpus = 2;
  two.gpu_ids = {1, 0};  // GPU 1 runs the first layers and the embeddings, GPU 0 the rest and the head
  auto ex = llm::make_gpu_executor(*o.ctrl, o.m, 8, two);
  CHECK_THAT(ex->describe(), Catch::Matchers::ContainsSubstring("layers split by each GPU's free memory (GPU 1: "));
  CHECK_THAT(ex->describe(), Catch::Matchers::ContainsSubstring("; GPU 1: GPU executor of layers 0-"));
  ex.reset();
  check_steps(test::run(*o.ctrl, o.m, two, &s2), want);
  REQUIRE(s2.gpus.size() == 2);
  CHECK((s2.gpus[0].gpu == 1 && s2.gpus[1].gpu == 0));
  CHECK((s2.gpus[0].layers.begin == 0 && s2.gpus[0].layers.end == s2.gpus[1].layers.begin && s2.gpus[1].layers.end == o.m.config.n_layer));
  CHECK(s2.gpus[0].vram_budget > 0);  // each its own free memory's budget: the tiny model all in VRAM
  CHECK(s2.resident_layers == o.m.config.n_layer);
}
