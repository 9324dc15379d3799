// The residency plan: tiers per layer from the budgets, spread over the model, the per-token bytes and
// the bound; and that no other placement within the budgets has a lower bound (brute force).
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <random>
#include <stdexcept>

#include "examples/llm/engine/residency_plan.h"

using namespace gpunvme::llm;

namespace {

std::vector<LayerBytes> dense_model(uint32_t n, uint64_t bytes) { return std::vector<LayerBytes>(n, LayerBytes{bytes, 0, 0, 0}); }

std::vector<uint32_t> in(const ResidencyPlan& p, Tier t) {
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < p.layers.size(); ++i)
    if (p.layers[i].dense == t) ids.push_back(i);
  return ids;
}

}  // namespace

TEST_CASE("dense model: VRAM, then RAM, then NVMe, each spread over the layers") {
  const ResidencyPlan p = plan_residency(dense_model(10, 100), {.vram = 350, .ram = 420});
  CHECK(in(p, Tier::kVram) == std::vector<uint32_t>{1, 5, 8});
  CHECK(in(p, Tier::kRam) == std::vector<uint32_t>{0, 3, 6, 9});
  CHECK(in(p, Tier::kNvme) == std::vector<uint32_t>{2, 4, 7});
  CHECK(p.placed_bytes(Tier::kVram) == 300);
  CHECK(p.placed_bytes(Tier::kRam) == 400);
  CHECK(p.ram_bytes_per_token() == 400);
  CHECK(p.nvme_bytes_per_token() == 300);
  CHECK(p.bound_seconds(100, 1000) == 3.0);  // NVMe-bound: 300 B at 100 B/s
  CHECK(p.bound_seconds(1000, 100) == 7.0);  // link-bound: 400 + 300 B through the GPU's link at 100 B/s
  CHECK(p.expert_cache_bytes == 0);
  CHECK_FALSE(p.any_fetched_experts());
}

TEST_CASE("budgets of 0 stream everything; a large VRAM budget keeps everything") {
  const ResidencyPlan none = plan_residency(dense_model(4, 64), {});
  CHECK(in(none, Tier::kNvme).size() == 4);
  CHECK(none.nvme_bytes_per_token() == 256);
  const ResidencyPlan all = plan_residency(dense_model(4, 64), {.vram = 1 << 20, .ram = 1 << 20});
  CHECK(in(all, Tier::kVram).size() == 4);
  CHECK(all.ram_bytes_per_token() == 0);
  CHECK(all.nvme_bytes_per_token() == 0);
  CHECK(all.bound_seconds(1, 1) == 0);
}

TEST_CASE("the plan's bound is the lowest of every placement that fits the budgets (brute force)") {
  std::mt19937 rng(7);
  const uint32_t L = 6;
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<LayerBytes> model = dense_model(L, 10);
    const Budgets b{.vram = rng() % 80, .ram = rng() % 80};
    const double bn = 1 + rng() % 50, bh = bn + rng() % 50;  // a x16 GPU link is not slower than the drive
    const double planned = plan_residency(model, b).bound_seconds(bn, bh);
    double best = 1e30;
    for (uint32_t code = 0; code < 729; ++code) {  // 3^6 assignments
      uint64_t v = 0, r = 0, n = 0;
      for (uint32_t i = 0, c = code; i < L; ++i, c /= 3) (c % 3 == 0 ? v : c % 3 == 1 ? r : n) += 10;
      if (v <= b.vram && r <= b.ram) best = std::min(best, std::max(n / bn, (n + r) / bh));
    }
    INFO("vram " << b.vram << " ram " << b.ram << " bn " << bn << " bh " << bh);
    CHECK(planned == best);
  }
}

TEST_CASE("MoE: dense parts first, then whole layers' experts in VRAM; RAM: dense parts, then the expert cache") {
  const std::vector<LayerBytes> moe(4, LayerBytes{.dense = 10, .experts = 80, .n_expert = 8, .n_used = 2});
  const ResidencyPlan p = plan_residency(moe, {.vram = 40 + 80 + 30, .ram = 60});
  CHECK(in(p, Tier::kVram).size() == 4);
  CHECK(p.layers[2].experts_in_vram);  // one of four, from the middle
  CHECK(std::count_if(p.layers.begin(), p.layers.end(), [](const LayerPlacement& l) { return l.experts_in_vram; }) == 1);
  CHECK(p.expert_cache_bytes == 60);
  CHECK(p.any_fetched_experts());
  // 240 B of fetched experts, 60 cached: 3/4 of the 2-of-8 share misses (NVMe), 1/4 hits (RAM); all of
  // it crosses the link.
  CHECK(p.nvme_bytes_per_token() == 0.75 * 240 * 2 / 8);
  CHECK(p.ram_bytes_per_token() == 0.25 * 240 * 2 / 8);
  CHECK(p.link_bytes_per_token() == 240 * 2 / 8);
  CHECK(p.placed_bytes(Tier::kVram) == 40 + 80);
  CHECK(p.placed_bytes(Tier::kRam) == 60);
  // A cache below two fetches (2 x 2 experts of 10 B) is no cache.
  CHECK(plan_residency(moe, {.vram = 40, .ram = 39}).expert_cache_bytes == 0);
  CHECK(plan_residency(moe, {.vram = 40, .ram = 40}).expert_cache_bytes == 40);
  CHECK(p.placed_bytes(Tier::kNvme) == 240);

  const ResidencyPlan small = plan_residency(moe, {.vram = 25, .ram = 1000});
  CHECK(in(small, Tier::kVram).size() == 2);
  CHECK(in(small, Tier::kRam).size() == 2);
  CHECK(small.expert_cache_bytes == 320);  // every expert fits: the cache is capped at what is fetched
  CHECK(small.ram_bytes_per_token() == 20 + 320 * 2 / 8);  // the dense parts, and every routed expert hits
  CHECK(small.nvme_bytes_per_token() == 0);
}

TEST_CASE("--resident N: the first N layers whole in VRAM, the rest on NVMe") {
  const std::vector<LayerBytes> moe(3, LayerBytes{.dense = 10, .experts = 80, .n_expert = 8, .n_used = 2});
  const ResidencyPlan p = plan_first_layers(moe, 2);
  CHECK(in(p, Tier::kVram) == std::vector<uint32_t>{0, 1});
  CHECK(p.layers[0].experts_in_vram);
  CHECK_FALSE(p.layers[2].experts_in_vram);
  CHECK(p.nvme_bytes_per_token() == 10 + 80.0 * 2 / 8);
  CHECK(plan_first_layers(moe, 99).count(Tier::kVram) == 3);
}

TEST_CASE("the table and the JSON name every tier") {
  const ResidencyPlan p = plan_residency(dense_model(10, 100), {.vram = 350, .ram = 420});
  const std::string t = plan_table(p);
  CHECK(t.find("VRAM       3  300 B       0 B         1,5,8\n") != std::string::npos);
  CHECK(t.find("RAM        4  400 B       400 B       0,3,6,9\n") != std::string::npos);
  CHECK(t.find("NVMe       3  300 B       300 B       2,4,7\n") != std::string::npos);
  const std::string j = plan_json(p);
  CHECK(j.find("\"layer_tiers\":[\"RAM\",\"VRAM\",\"NVMe\",\"RAM\"") != std::string::npos);
  CHECK(j.find("\"ram_bytes_per_token\":400") != std::string::npos);
  CHECK(j.find("\"layer_dense_bytes\":[100,100,100,100,100,100,100,100,100,100],\"layer_expert_bytes\":[0,0,0,0,0,0,0,0,0,0]}") !=
        std::string::npos);
}

TEST_CASE("bad input is refused") {
  CHECK_THROWS_AS(plan_residency({}, {}), std::invalid_argument);
  CHECK_THROWS_AS(plan_residency({LayerBytes{.dense = 1, .experts = 8, .n_expert = 2, .n_used = 3}}, {}), std::invalid_argument);
}
