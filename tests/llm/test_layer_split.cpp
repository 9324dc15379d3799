// Several GPUs (issue 35), the parts that need none: the layers split into contiguous ranges, each
// range's plan by its own budget, a range's plan as the model-wide plan its executor indexes, the GPUs'
// plans joined, the per-GPU JSON; and NVLink multicast kept off before any NCCL communicator exists.
#include <catch2/catch_test_macros.hpp>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/layer_split.h"
#include "examples/llm/engine/nccl_env.h"

using namespace gpunvme::llm;

namespace {

// Each layer's tier, in order.
std::vector<Tier> tiers(const ResidencyPlan& p) {
  std::vector<Tier> t;
  for (const LayerPlacement& l : p.layers) t.push_back(l.dense);
  return t;
}

}  // namespace

TEST_CASE("split_layers: contiguous ranges in order, sizes differing by one at most, the first the larger") {
  const std::vector<LayerRange> r = split_layers(10, 3);
  REQUIRE(r.size() == 3);
  CHECK((r[0].begin == 0 && r[0].end == 4));
  CHECK((r[1].begin == 4 && r[1].end == 7));
  CHECK((r[2].begin == 7 && r[2].end == 10));
  CHECK(split_layers(80, 2)[1].begin == 40);
  CHECK(split_layers(3, 1)[0].size() == 3);
  CHECK(split_layers(3, 3)[2].size() == 1);
}

TEST_CASE("split_layers: no GPU, or a GPU with no layer, is refused naming the fix") {
  CHECK_THROWS_AS(split_layers(3, 0), std::invalid_argument);
  try {
    split_layers(3, 4);
    FAIL("4 GPUs for 3 layers accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("--gpus 3 or fewer") != std::string::npos);
  }
}

TEST_CASE("budgets_per_gpu: one value for every GPU, or one per GPU; another count is refused naming the fix") {
  CHECK(budgets_per_gpu({5}, 3) == std::vector<uint64_t>{5, 5, 5});
  CHECK(budgets_per_gpu({22, 40}, 2) == std::vector<uint64_t>{22, 40});
  try {
    budgets_per_gpu({1, 2, 3}, 2);
    FAIL("3 budgets for 2 GPUs accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("has 3 values for --gpus 2: give one (every GPU's) or 2") != std::string::npos);
  }
  CHECK_THROWS_AS(budgets_per_gpu({1, 2}, 1), std::invalid_argument);
  CHECK_THROWS_AS(budgets_per_gpu({}, 2), std::invalid_argument);
}

namespace {
std::vector<uint32_t> sizes(const std::vector<LayerRange>& r) {
  std::vector<uint32_t> s;
  uint32_t at = 0;
  for (const LayerRange& x : r) {
    CHECK(x.begin == at);  // contiguous, in order
    at = x.end;
    s.push_back(x.size());
  }
  return s;
}
}  // namespace

TEST_CASE("split_by_budgets: the GPU with more VRAM takes more layers, each GPU streaming about as many bytes") {
  const std::vector<LayerBytes> all(8, LayerBytes{100, 0, 0, 0});
  // Equal budgets: equal halves.
  CHECK(sizes(split_by_budgets(all, {{.vram = 200}, {.vram = 200}})) == std::vector<uint32_t>{4, 4});
  // GPU 0 holds nothing, GPU 1 four layers: 2 streamed each (an equal split would stream 4 on GPU 0, 0 on GPU 1).
  const std::vector<LayerRange> r = split_by_budgets(all, {{.vram = 0}, {.vram = 400}});
  CHECK(sizes(r) == std::vector<uint32_t>{2, 6});
  CHECK(plan_range(all, r[0], {.vram = 0}).nvme_bytes_per_token() == 200);
  CHECK(plan_range(all, r[1], {.vram = 400}).nvme_bytes_per_token() == 200);
  // 22G,40G-like: 80 layers of 1 unit, 22 and 40 units: 80 - 62 = 18 streamed, 9 each: 31 and 49 layers.
  const std::vector<LayerBytes> big(80, LayerBytes{1000, 0, 0, 0});
  CHECK(sizes(split_by_budgets(big, {{.vram = 22000}, {.vram = 40000}})) == std::vector<uint32_t>{31, 49});
  // The order of the list is the GPUs' order.
  CHECK(sizes(split_by_budgets(big, {{.vram = 40000}, {.vram = 22000}})) == std::vector<uint32_t>{49, 31});
}

TEST_CASE("split_by_budgets: bytes, not layer counts; at equal bytes the fewest layers in the largest range") {
  // A large first layer: ranges {0,1} {1,6} and {0,2} {2,6} both stream 500 at most; the second has 4 layers at most, not 5.
  const std::vector<LayerBytes> all{{400, 0, 0, 0}, {100, 0, 0, 0}, {100, 0, 0, 0}, {100, 0, 0, 0}, {100, 0, 0, 0}, {100, 0, 0, 0}};
  CHECK(sizes(split_by_budgets(all, {{}, {}})) == std::vector<uint32_t>{2, 4});
  // Everything fits everywhere: nothing streams, so layer counts decide (10 over 3: none above 4).
  const std::vector<LayerBytes> ten(10, LayerBytes{100, 0, 0, 0});
  CHECK(sizes(split_by_budgets(ten, {{.vram = 5000}, {.vram = 5000}, {.vram = 5000}})) == std::vector<uint32_t>{4, 3, 3});
  CHECK(sizes(split_by_budgets(ten, {{}, {}, {}})) == std::vector<uint32_t>{4, 3, 3});  // split_layers' split
  // Each GPU keeps at least one layer even where its budget would rather give it none.
  CHECK(sizes(split_by_budgets(std::vector<LayerBytes>(3, LayerBytes{100, 0, 0, 0}), {{}, {.vram = 1000}, {}})) ==
        std::vector<uint32_t>{1, 1, 1});
}

TEST_CASE("split_by_budgets: more GPUs than layers, or none, is refused as split_layers refuses") {
  const std::vector<LayerBytes> all(3, LayerBytes{100, 0, 0, 0});
  try {
    split_by_budgets(all, std::vector<Budgets>(4, Budgets{.vram = 100}));
    FAIL("4 GPUs for 3 layers accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("--gpus 3 or fewer") != std::string::npos);
  }
  CHECK_THROWS_AS(split_by_budgets(all, {}), std::invalid_argument);
}

TEST_CASE("split_by_budgets: MoE layers by their per-token bytes (k/n of the experts), not their stored bytes") {
  // 4 MoE layers: dense 100, experts 800 of which 2/8 read per token (200): 300 per streamed layer.
  const std::vector<LayerBytes> all(4, LayerBytes{100, 800, 8, 2});
  const std::vector<LayerRange> r = split_by_budgets(all, {{.vram = 0}, {.vram = 1800}});  // GPU 1 holds 2 layers whole
  CHECK(sizes(r) == std::vector<uint32_t>{1, 3});
}

TEST_CASE("plan_range: each GPU's layers by its own budget; range_in_model and join_plans keep the indices") {
  const std::vector<LayerBytes> all(8, LayerBytes{100, 0, 0, 0});
  const std::vector<LayerRange> r = split_layers(8, 2);
  // Each GPU's budget holds 2 of its 4 layers: 2 VRAM layers per range, spread over it (not 4 at the model's start).
  const ResidencyPlan a = plan_range(all, r[0], {.vram = 250, .ram = 0});
  const ResidencyPlan b = plan_range(all, r[1], {.vram = 250, .ram = 0});
  REQUIRE(a.layers.size() == 4);
  CHECK(tiers(a) == tiers(plan_residency(std::vector<LayerBytes>(4, LayerBytes{100, 0, 0, 0}), {.vram = 250})));
  CHECK(a.count(Tier::kVram) == 2);
  const ResidencyPlan whole = join_plans({a, b});
  REQUIRE(whole.layers.size() == 8);
  CHECK(whole.count(Tier::kVram) == 4);
  CHECK(whole.count(Tier::kNvme) == 4);
  CHECK(whole.placed_bytes(Tier::kVram) == 400);
  // GPU 1's plan as the model-wide plan its executor indexes: its layers at 4..7, the others hold nothing.
  const ResidencyPlan m1 = range_in_model(b, r[1], 8);
  REQUIRE(m1.layers.size() == 8);
  for (uint32_t i = 0; i < 4; ++i) {
    CHECK(m1.bytes[i].dense == 0);
    CHECK(m1.layers[i].experts_in_vram);
  }
  for (uint32_t i = 0; i < 4; ++i) CHECK(m1.layers[4 + i].dense == b.layers[i].dense);
  CHECK(m1.placed_bytes(Tier::kVram) == b.placed_bytes(Tier::kVram));
  CHECK(m1.count(Tier::kNvme) == b.count(Tier::kNvme));
  CHECK_FALSE(m1.any_fetched_experts());
  CHECK_THROWS_AS(plan_range(all, {6, 9}, {}), std::invalid_argument);
}

TEST_CASE("plan_range_first: --resident N keeps its one-GPU meaning, the model's first N layers") {
  const std::vector<LayerBytes> all(6, LayerBytes{100, 0, 0, 0});
  const std::vector<LayerRange> r = split_layers(6, 2);
  const ResidencyPlan a = plan_range_first(all, r[0], 4), b = plan_range_first(all, r[1], 4);
  CHECK(a.count(Tier::kVram) == 3);
  CHECK(tiers(b) == std::vector<Tier>{Tier::kVram, Tier::kNvme, Tier::kNvme});  // model layers 3 (resident), 4, 5
}

TEST_CASE("MoE: a range with fetched experts keeps its expert cache; the other GPU's layers fetch nothing") {
  const std::vector<LayerBytes> all(4, LayerBytes{100, 800, 8, 2});
  const std::vector<LayerRange> r = split_layers(4, 2);
  const ResidencyPlan a = plan_range(all, r[0], {.vram = 200, .ram = 1000});
  CHECK(a.any_fetched_experts());
  CHECK(a.expert_cache_bytes > 0);
  const ResidencyPlan m0 = range_in_model(a, r[0], 4);
  CHECK(m0.any_fetched_experts());
  CHECK(m0.expert_cache_bytes == a.expert_cache_bytes);
  CHECK(m0.nvme_bytes_per_token() == a.nvme_bytes_per_token());
}

TEST_CASE("gpus_json: each GPU's layers, budget, bytes and plan") {
  const std::vector<LayerBytes> all(4, LayerBytes{100, 0, 0, 0});
  const std::vector<LayerRange> r = split_layers(4, 2);
  const std::vector<GpuShare> g{{0, r[0], plan_range(all, r[0], {.vram = 200}), 200, 1234},
                                {1, r[1], plan_range(all, r[1], {.vram = 100}), 100, 99}};
  const std::string j = gpus_json(g);
  CHECK(j.rfind("[{\"gpu\":0,\"first_layer\":0,\"end_layer\":2,\"vram_budget\":200,\"resident_bytes\":1234,\"plan\":{", 0) == 0);
  CHECK(j.find("{\"gpu\":1,\"first_layer\":2,\"end_layer\":4,\"vram_budget\":100,\"resident_bytes\":99,") != std::string::npos);
  CHECK(j.find("\"layer_tiers\":[\"VRAM\",\"VRAM\"]") != std::string::npos);
  CHECK(j.find("\"layer_tiers\":[\"NVMe\",\"VRAM\"]") != std::string::npos);  // spread: the middle of the range
  CHECK(gpus_table(g).find("GPU 1: layers 2-3") != std::string::npos);
}

TEST_CASE("sum_gpu_stats: every GPU's bytes and MoE counters summed, per GPU in gpus, echoes of the GPU that fetched") {
  const std::vector<LayerBytes> all(4, LayerBytes{100, 800, 8, 2});
  const std::vector<LayerRange> r = split_layers(4, 2);
  ExecStats a, b;
  a.plan = plan_range(all, r[0], {.vram = 2000}), b.plan = plan_range(all, r[1], {.vram = 0, .ram = 1000});
  a.streamed_bytes = 10, b.streamed_bytes = 32, a.resident_layers = 2, b.streamed_layers = 2;
  // GPU 0 holds its experts whole (no fetch, no prefetch); GPU 1 fetches and prefetches.
  b.has_experts = true, b.expert_prefetch = true, b.expert_pregate = 4;
  b.experts.requested = 40, b.experts.hits = 30, b.experts.tokens = 20;
  b.prefetch.reads = 12, b.prefetch.hits = 9, b.prefetch.wasted = 3, b.prefetch.stall_seconds = {0, 0, 1.5, 2.5};
  a.pregate_passes = 2, b.pregate_passes = 5;  // passes of several tokens predicted on each GPU
  b.lag = {.tokens = 9, .routed = 36, .predicted_hits = 20, .wasted = 16, .wasted_bytes = 1600};
  a.lag = {.tokens = 9, .routed = 0};
  a.prefetch.stall_seconds = {0.5};
  const ExecStats s = sum_gpu_stats({a, b}, r);
  CHECK(s.streamed_bytes == 42);
  CHECK((s.resident_layers == 2 && s.streamed_layers == 2));
  CHECK(s.has_experts);
  CHECK(s.expert_prefetch);  // GPU 1's echo, not GPU 0's (which fetches nothing)
  CHECK(s.expert_pregate == 4);
  CHECK(s.pregate_passes == 7);
  CHECK((s.experts.requested == 40 && s.experts.hits == 30));
  CHECK((s.prefetch.reads == 12 && s.prefetch.hits == 9 && s.prefetch.wasted == 3));
  CHECK(s.prefetch.stall_seconds == std::vector<double>{0.5, 0, 1.5, 2.5});
  CHECK((s.lag.tokens == 9 && s.lag.routed == 36 && s.lag.predicted_hits == 20));  // the same tokens, not 18
  CHECK(s.plan.layers.size() == 4);
  REQUIRE(s.gpus.size() == 2);
  CHECK((s.gpus[0].experts_requested == 0 && s.gpus[0].prefetch_reads == 0));
  CHECK((s.gpus[1].experts_requested == 40 && s.gpus[1].expert_hits == 30 && s.gpus[1].prefetch_reads == 12));
  CHECK((s.gpus[1].prefetch_hits == 9 && s.gpus[1].prefetch_wasted == 3 && s.gpus[1].lag.routed == 36));
  const std::string j = gpus_json(s.gpus);
  CHECK(j.find("\"experts_requested\":40,\"expert_hits\":30,\"prefetch_reads\":12,\"prefetch_hits\":9,\"prefetch_wasted\":3,"
               "\"lag_tokens\":9,\"lag_routed\":36,\"lag_predicted_hits\":20,\"device\":\"\"}") != std::string::npos);
  ExecStats named = s;
  named.gpus[1].device = "emu:/tmp/b\"\n.img";  // escaped in both
  CHECK(gpus_json(named.gpus).find("\"device\":\"emu:/tmp/b\\\"\\n.img\"}]") != std::string::npos);
  CHECK(gpus_table(named.gpus).find("GPU 1: layers 2-3 (its plan numbers them from 0), VRAM budget (--resident), weights in GPU memory 0 B, "
                                    "streams from emu:/tmp/b\"\\n.img\n") != std::string::npos);
  CHECK(gpus_table(s.gpus).find("its experts: 40 routed, 30 cache hits; prefetched 12 (9 used, 3 wasted)") != std::string::npos);
  CHECK_THROWS_AS(sum_gpu_stats({a}, r), std::invalid_argument);
}

TEST_CASE("gpus_bound_seconds: one shared drive sums the GPUs' NVMe bytes, a drive per GPU takes the busiest; links per GPU") {
  const std::vector<LayerBytes> all(4, LayerBytes{100, 0, 0, 0});
  const std::vector<LayerRange> r = split_layers(4, 2);
  // GPU 0 streams 2 layers (200), GPU 1 one (100, one in VRAM).
  const std::vector<GpuShare> g{{0, r[0], plan_range(all, r[0], {.vram = 0})}, {1, r[1], plan_range(all, r[1], {.vram = 100})}};
  CHECK(gpus_bound_seconds(g, 100, 1000, false) == 3.0);  // 300 bytes through one drive at 100 B/s
  CHECK(gpus_bound_seconds(g, 100, 1000, true) == 2.0);   // GPU 0's 200 on its own drive
  CHECK(gpus_bound_seconds(g, 1000, 50, true) == 4.0);    // GPU 0's 200 over its own host link at 50 B/s, not 300
  CHECK(gpus_bound_seconds({g[0]}, 100, 50, false) == g[0].plan.bound_seconds(100, 50));  // one GPU: the plan's
  CHECK(gpus_bound_seconds({g[0]}, 100, 50, true) == g[0].plan.bound_seconds(100, 50));
}

TEST_CASE("disable_nvls: NCCL_NVLS_ENABLE is 0 before NCCL starts; a user's other value is refused, 0 kept") {
  unsetenv(kNvlsVariable);
  disable_nvls();
  REQUIRE(std::getenv(kNvlsVariable) != nullptr);
  CHECK(std::string(std::getenv(kNvlsVariable)) == "0");
  disable_nvls();  // again: still 0, no error
  CHECK(std::string(std::getenv(kNvlsVariable)) == "0");
  setenv(kNvlsVariable, "1", 1);
  try {
    disable_nvls();
    FAIL("NCCL_NVLS_ENABLE=1 accepted");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("set it to 0") != std::string::npos);
  }
  CHECK(std::string(std::getenv(kNvlsVariable)) == "1");  // the user's setting is not replaced behind their back
  setenv(kNvlsVariable, "", 1);  // empty is not 0 either
  CHECK_THROWS_AS(disable_nvls(), std::runtime_error);
  unsetenv(kNvlsVariable);
}
