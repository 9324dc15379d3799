// Several GPUs (issue 35), the parts that need none: the layers split into contiguous ranges, each
// range's plan by its own budget, a range's plan as the model-wide plan its executor indexes, the GPUs'
// plans joined, the per-GPU JSON; --gpus read as a count or CUDA ids and held to the GPUs CUDA sees (a
// fake count); the split by each GPU's free memory (fake numbers); each GPU's streaming slots
// (stream_slots.h) and the bound a drive per GPU gives with them; NVLink multicast kept off before any
// NCCL communicator exists.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/gpu_ids.h"
#include "examples/llm/engine/layer_split.h"
#include "examples/llm/engine/nccl_env.h"
#include "examples/llm/engine/stream_slots.h"
#include "examples/llm/engine/vram_reserve.h"

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
  b.experts.requested = 40, b.experts.hits = 30, b.experts.tokens = 20, b.experts.bytes_read = 5000;
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
  CHECK((s.gpus[0].expert_bytes_read == 0 && s.gpus[1].expert_bytes_read == 5000));  // each GPU's own (the chain floor's, llm_tokens)
  const std::string j = gpus_json(s.gpus);
  CHECK(j.find("\"experts_requested\":40,\"expert_hits\":30,\"prefetch_reads\":12,\"prefetch_hits\":9,\"prefetch_wasted\":3,"
               "\"lag_tokens\":9,\"lag_routed\":36,\"lag_predicted_hits\":20,\"stream_slots\":0,\"slot_bytes\":0,\"device\":\"\"}") != std::string::npos);
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

TEST_CASE("turns_floor_seconds: a drive per GPU reads in its own turn what its slots cannot hold ahead") {
  // 8 layers, 2 GPUs, nothing in VRAM: each streams 4 layers of 100, 300, 100, 100 bytes (600), at 100 B/s.
  const std::vector<LayerBytes> all{{100}, {300}, {100}, {100}, {100}, {300}, {100}, {100}};
  const std::vector<LayerRange> r = split_layers(8, 2);
  std::vector<GpuShare> g{{0, r[0], plan_range(all, r[0], {.vram = 0})}, {1, r[1], plan_range(all, r[1], {.vram = 0})}};
  CHECK(turns_floor_seconds(g, 100) == 0.0);          // slots not known: nothing added
  CHECK(gpus_bound_seconds(g, 100, 0, true) == 6.0);  // the busiest drive: 600 / 100
  g[0].stream_slots = g[1].stream_slots = 4;          // a slot per streamed layer (auto): no floor past the drives
  CHECK(turns_floor_seconds(g, 100) == 0.0);
  g[0].stream_slots = g[1].stream_slots = 1;  // each holds its largest (300) ahead, reads 300 in its own turn
  CHECK(turns_floor_seconds(g, 100) == 6.0);
  CHECK(turns_floor_seconds(g, 0) == 0.0);    // an unthrottled drive bounds nothing
  g[0].stream_slots = 2;                      // GPU 0: 200 in its turn, GPU 1: 300
  CHECK(turns_floor_seconds(g, 100) == 5.0);
  CHECK(gpus_bound_seconds(g, 100, 0, true) == 6.0);  // 500 in turns, 600 on the busiest drive
  // 3 GPUs, one slot each: 300 + 300 + 300 read in turn, past the 600 of the busiest drive.
  g[0].stream_slots = 1;
  std::vector<GpuShare> three = g;
  three.push_back(g[1]);
  CHECK(gpus_bound_seconds(three, 100, 0, true) == 9.0);
  CHECK(gpus_bound_seconds(three, 100, 0, false) == 18.0);  // one shared drive: all 1800 bytes, turns or not
}

TEST_CASE("stream_slots: 2 on one GPU; a slot per streamed layer on each GPU of several, within host memory and VRAM") {
  const StreamSlotInputs one{.streamed_layers = 40, .slot_bytes = 700, .template_bytes = 1, .host_share = 1000000};
  CHECK(stream_slots(one) == 2);
  StreamSlotInputs in = one;
  in.pipeline = true, in.streamed_layers = 7;
  CHECK(stream_slots(in) == 7);  // 70B-shaped 22G:0 on 2 GPUs: 7 streamed each
  in.streamed_layers = 1;
  CHECK(stream_slots(in) == 2);  // never below the default
  in.streamed_layers = 200;
  CHECK(stream_slots(in) == kMaxStreamSlots);  // the streamer's most
  in.streamed_layers = 40, in.host_share = 700 * 12 + 699;
  CHECK(stream_slots(in) == 12);  // 12 slots of 700 bytes fit the host share
  in.host_share = 100;
  CHECK(stream_slots(in) == 2);  // no share to spare: the default
  in.host_share = 1000000, in.template_bytes = kSlotTemplateVram / 5;
  CHECK(stream_slots(in) == 7);  // the 5 past the default two hold their templates in kSlotTemplateVram
  in.asked = 3;
  CHECK(stream_slots(in) == 3);  // --slots N wins
  CHECK(stream_slots({.asked = 9}) == 9);
  // Each GPU's host share: a quarter of what is available past the RAM budget, split evenly; unknown: none.
  CHECK(slot_host_share(1000, 200, 2) == 100);
  CHECK(slot_host_share(1000, 1000, 2) == 0);
  CHECK(slot_host_share(std::nullopt, 0, 2) == 0);
  // The RAM tier's GPU buffers keep the default under auto; an explicit count sets them.
  CHECK(ram_tier_depth(0) == 2);
  CHECK(ram_tier_depth(5) == 5);
  const std::vector<LayerBytes> layers{{100}, {300}};
  CHECK(vram_kept_back(layers, 0, 1) == 2 * 300 + kVramReserve);
  CHECK(vram_kept_back(layers, 4, 1) == 4 * 300 + kVramReserve);
}

TEST_CASE("gpu_share: a GPU's streaming slots in its entry, the table and the JSON; the sum keeps them per GPU") {
  const std::vector<LayerBytes> all(4, LayerBytes{100, 0, 0, 0});
  const std::vector<LayerRange> r = split_layers(4, 2);
  ExecStats a, b;
  a.plan = plan_range(all, r[0], {.vram = 0}), b.plan = plan_range(all, r[1], {.vram = 200});
  a.stream_slots = 2, a.slot_bytes = 4096;
  const ExecStats s = sum_gpu_stats({a, b}, r);
  CHECK((s.stream_slots == 0 && s.slot_bytes == 0));
  REQUIRE(s.gpus.size() == 2);
  CHECK((s.gpus[0].stream_slots == 2 && s.gpus[0].slot_bytes == 4096 && s.gpus[1].stream_slots == 0));
  CHECK(gpus_json(s.gpus).find("\"stream_slots\":2,\"slot_bytes\":4096,\"device\"") != std::string::npos);
  CHECK(gpus_table(s.gpus).find("weights in GPU memory 0 B, 2 streaming slot(s) of 4.00 KiB in pinned host memory\n") != std::string::npos);
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

using Catch::Matchers::ContainsSubstring;

TEST_CASE("parse_gpus: a count, or CUDA ids in pipeline order (device=N for one); refusals name the fix") {
  CHECK((parse_gpus("2").count == 2 && parse_gpus("2").ids.empty()));
  CHECK(parse_gpus("0,2").ids == std::vector<int>{0, 2});
  CHECK(parse_gpus("0,2").count == 2);
  CHECK(parse_gpus("2,0").ids == std::vector<int>{2, 0});  // the order is the layers' order
  CHECK(parse_gpus("device=1").ids == std::vector<int>{1});
  CHECK(parse_gpus("device=1").count == 1);
  CHECK(parse_gpus("device=0,3").ids == std::vector<int>{0, 3});
  CHECK_THROWS_WITH(parse_gpus("0"), ContainsSubstring("give a count of 1 or more, or device ids (device=0 for GPU 0 alone"));
  CHECK_THROWS_WITH(parse_gpus("0,2,0"), ContainsSubstring("--gpus 0,2,0: GPU 0 is listed twice"));
  for (const char* bad : {"two", "1,,2", "-1", "device=", "0,x", "device=a", "1,"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_gpus(bad), ContainsSubstring("--gpus takes a count, 2, or CUDA device ids: 0,2, or device=1 for one GPU"));
  }
  CHECK_THROWS_AS(parse_gpus("0,5000"), std::invalid_argument);
  CHECK(gpu_devices(3, {}) == std::vector<int>{0, 1, 2});
  CHECK(gpu_devices(2, std::vector<int>{2, 0}) == std::vector<int>{2, 0});
  CHECK(gpus_option(3, {}) == "--gpus 3");
  CHECK(gpus_option(2, std::vector<int>{0, 2}) == "--gpus 0,2");
  CHECK(gpus_option(1, std::vector<int>{1}) == "--gpus device=1");
}

TEST_CASE("check_gpus_present: a GPU CUDA does not see is refused naming it, the count and CUDA_VISIBLE_DEVICES") {
  CHECK_NOTHROW(check_gpus_present(1, std::vector<int>{0}, 1, nullptr));
  CHECK_NOTHROW(check_gpus_present(2, std::vector<int>{3, 1}, 4, nullptr));
  CHECK_NOTHROW(check_gpus_present(2, {}, 2, nullptr));
  CHECK_THROWS_WITH(check_gpus_present(2, std::vector<int>{0, 1}, 1, nullptr),
                    "--gpus 0,1: no GPU 1: CUDA sees 1 GPU here (id 0): give ids below 1");
  CHECK_THROWS_WITH(check_gpus_present(1, std::vector<int>{3}, 2, "0,2"),
                    "--gpus device=3: no GPU 3: CUDA sees 2 GPUs here (ids 0 to 1), CUDA_VISIBLE_DEVICES=0,2 chooses and "
                    "renumbers them: give ids below 2");
  CHECK_THROWS_WITH(check_gpus_present(3, {}, 2, nullptr), "--gpus 3: no GPU 2: CUDA sees 2 GPUs here (ids 0 to 1): use --gpus 2 or fewer");
  CHECK_THROWS_WITH(check_gpus_present(2, std::vector<int>{4, 5}, 0, ""),
                    "--gpus 4,5: no GPU 4,5: CUDA sees no GPU here, CUDA_VISIBLE_DEVICES= chooses and renumbers them: use --path cpu");
}

TEST_CASE("split_gpus: without budgets each GPU's range is sized by its free memory, less what it keeps and holds") {
  const std::vector<LayerBytes> all(8, LayerBytes{100, 0, 0, 0});
  SplitInputs in{.devices = {0, 2}, .free = {850, 450}, .kept_back = 50, .first_globals = 30, .last_globals = 20};
  // Budgets 850 - 50 - 30 = 770 (7 layers) and 450 - 50 - 20 = 380 (3 layers): 5 + 3, nothing streamed;
  // equal counts would stream one of GPU 2's 4 layers.
  const GpuSplit s = split_gpus(all, in);
  CHECK(s.vram == std::vector<uint64_t>{770, 380});
  CHECK(sizes(s.ranges) == std::vector<uint32_t>{5, 3});
  CHECK(s.rule == "each GPU's free memory");
  CHECK(plan_range(all, s.ranges[1], {.vram = 380}).link_bytes_per_token() == 0);
  CHECK(plan_range(all, split_layers(8, 2)[1], {.vram = 380}).link_bytes_per_token() == 100);
  // The other way round: the larger share follows the free memory, not the GPU's place.
  in.free = {450, 850};
  CHECK(sizes(split_gpus(all, in).ranges) == std::vector<uint32_t>{3, 5});
  // Budgets given: the free memory is not read; --resident N: equal counts.
  CHECK(sizes(split_gpus(all, {.devices = {0, 1}, .vram = {0, 400}}).ranges) == std::vector<uint32_t>{2, 6});
  CHECK(split_gpus(all, {.devices = {0, 1}, .vram = {0, 400}}).rule == "the budgets");
  const GpuSplit even = split_gpus(all, {.devices = {0, 1}, .by_count = true});
  CHECK(sizes(even.ranges) == std::vector<uint32_t>{4, 4});
  CHECK(even.vram.empty());
}

TEST_CASE("split_gpus / split_by_budgets: each range's KV cache comes out of its GPU's budget first") {
  const std::vector<LayerBytes> all(4, LayerBytes{100, 0, 0, 0});
  // Without the cache GPU 1's 250 hold 2 layers and the even split streams nothing; with 100 per layer its
  // 2 layers' cache leaves 50 (both streamed), one layer's leaves 150 (resident): 3 + 1, nothing streamed.
  CHECK(sizes(split_by_budgets(all, {{.vram = 1000}, {.vram = 250}})) == std::vector<uint32_t>{2, 2});
  CHECK(sizes(split_by_budgets(all, {{.vram = 1000}, {.vram = 250}}, 100)) == std::vector<uint32_t>{3, 1});
  CHECK(sizes(split_gpus(all, {.devices = {0, 1}, .vram = {1000, 250}, .kv_per_layer = 100}).ranges) == std::vector<uint32_t>{3, 1});
  // A GPU of at most one layer's cache takes one layer; budgets that hold fewer caches than layers: refused.
  CHECK(sizes(split_by_budgets(all, {{.vram = 100}, {.vram = 1000}}, 100)) == std::vector<uint32_t>{1, 3});
  CHECK_THROWS_WITH(split_by_budgets(all, {{.vram = 150}, {.vram = 250}}, 100),
                    ContainsSubstring("the VRAM budgets hold the KV cache of fewer layers than the model's 4"));
}

TEST_CASE("split_gpus: a GPU that would hold no layer is refused naming it (its budget, its free memory, the layer count)") {
  const std::vector<LayerBytes> all(4, LayerBytes{100, 0, 0, 0});
  CHECK_THROWS_WITH(split_gpus(all, {.devices = {0, 3}, .vram = {1000, 50}, .kv_per_layer = 100}),
                    "--vram-budget gives GPU 3 50 B, less than one layer's KV cache (100 B): it would hold no layer: give it "
                    "more, or leave it out of --gpus");
  // Free memory: GPU 2 (the last, holding the head's 20) has 60, less than the 50 it keeps + 20 + one cache of 5.
  CHECK_THROWS_WITH(split_gpus(all, {.devices = {0, 2}, .free = {1000, 60}, .kept_back = 50, .last_globals = 20, .kv_per_layer = 5}),
                    "GPU 2 has 60 B free, less than the 75 B a layer needs there (50 B its executor keeps back, 20 B of global "
                    "weights, 5 B of one layer's KV cache): it would hold no layer: free memory on it, or leave it out of --gpus");
  CHECK_NOTHROW(split_gpus(all, {.devices = {0, 2}, .free = {1000, 75}, .kept_back = 50, .last_globals = 20, .kv_per_layer = 5}));
  // More GPUs than layers: the first GPU without one is named.
  CHECK_THROWS_WITH(split_gpus(all, {.devices = {0, 1, 2, 3, 4, 5}, .by_count = true}),
                    "6 GPUs for a model of 4 layers: GPU 4 and those after it would hold none: use --gpus 4 or fewer (or as many ids)");
  CHECK_THROWS_WITH(split_gpus(all, {.devices = {0, 1, 2, 7, 5}, .vram = {1, 1, 1, 1, 1}}),
                    ContainsSubstring("GPU 5 would hold none"));
}

TEST_CASE("gpu_share: one GPU's entry names its CUDA id; one GPU by id prints as one") {
  ExecStats s;
  s.plan = plan_range(std::vector<LayerBytes>(3, LayerBytes{100, 0, 0, 0}), {0, 3}, {.vram = 1000});
  s.vram_budget = 1000;
  s.resident_bytes = 300;
  const std::vector<GpuShare> g{gpu_share(s, 2, {0, 3})};
  CHECK(gpus_json(g).rfind("[{\"gpu\":2,\"first_layer\":0,\"end_layer\":3,\"vram_budget\":1000,\"resident_bytes\":300,", 0) == 0);
  CHECK(gpus_table(g).rfind("GPU (chosen by id):\nGPU 2: layers 0-2", 0) == 0);
}
