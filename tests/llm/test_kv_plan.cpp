// The KV cache in the residency plan (issue 37): its bytes (kv_cache_shape.h, the arithmetic GpuForward
// allocates by), taken from the VRAM budget before any layer, the slots --max-seqs auto gets from the
// budget, the one refusal of a cache the budget cannot hold, and the table's line and the JSON's field.
#include <catch2/catch_test_macros.hpp>

#include <stdexcept>
#include <string>

#include "examples/llm/compute/kv_cache_shape.h"
#include "examples/llm/engine/layer_split.h"
#include "examples/llm/engine/residency_plan.h"

using namespace gpunvme::llm;

namespace {

std::vector<LayerBytes> dense_model(uint32_t n, uint64_t bytes) { return std::vector<LayerBytes>(n, LayerBytes{bytes, 0, 0, 0}); }

// 4 layers, 2 KV heads of 8: kv_dim 16.
ModelConfig small_config() {
  ModelConfig c;
  c.n_layer = 4, c.n_head = 4, c.n_head_kv = 2, c.head_dim = 8, c.n_embd = 32;
  return c;
}

std::string message_of(const auto& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// The refusal names the cache and every fix a user has: fewer sequences only where there are several.
void check_refusal(const std::string& m, const std::string& cache) {
  INFO(m);
  CHECK(m.find("the KV cache (" + cache + ") does not fit in GPU memory: the VRAM budget is") == 0);
  for (const char* fix : {"--ctx", "--kv-host", "--vram-budget"}) CHECK(m.find(fix) != std::string::npos);
  CHECK((m.find("fewer sequences (--max-seqs)") != std::string::npos) == (cache.find("1 sequence(s)") != 0));
}

}  // namespace

TEST_CASE("the KV cache's bytes: K and V in f16, per layer, slot and position") {
  const ModelConfig c = small_config();
  CHECK(kv_slot_bytes(c, 4, 10) == 2 * 4 * 10 * 16 * 2);
  CHECK(kv_cache_bytes(c, KvCacheShape{0, 0, 3, false}, 10) == 3 * 2560);      // end 0: to the last layer
  CHECK(kv_cache_bytes(c, KvCacheShape{1, 3, 3, true}, 10) == 3 * 2 * 2 * 10 * 16 * 2);  // a GPU's range; host or not
  CHECK(plan_kv(c, dense_model(4, 100), 10, 3, false, 1 << 20, 64).bytes == 3 * 2560);
}

TEST_CASE("a VRAM cache takes its bytes from the VRAM budget before any layer; a host one none") {
  const KvPlan vram{.slots = 2, .ctx = 10, .bytes = 150};
  const ResidencyPlan p = plan_residency(dense_model(10, 100), {.vram = 350, .ram = 0}, vram);
  CHECK(p.count(Tier::kVram) == 2);  // 350 - 150 holds two layers of 100
  CHECK(p.kv.bytes == 150);
  CHECK(p.vram_budget == 350);
  KvPlan host = vram;
  host.host = true;
  CHECK(plan_residency(dense_model(10, 100), {.vram = 350, .ram = 0}, host).count(Tier::kVram) == 3);
  CHECK(plan_residency(dense_model(10, 100), {.vram = 350, .ram = 0}).count(Tier::kVram) == 3);  // none counted
  const KvPlan too_big{.slots = 4, .ctx = 10, .bytes = 351 << 20};
  check_refusal(message_of([&] { plan_residency(dense_model(10, 100), {.vram = 350 << 20}, too_big); }), "4 sequence(s) of 10 positions, 351.00 MiB");
}

TEST_CASE("--max-seqs auto: the cache's share is what the whole model leaves of the budget, or a quarter of it") {
  const std::vector<LayerBytes> model = dense_model(10, 100);  // 1000 bytes
  CHECK(auto_kv_slots(model, 2000, 100, 8, 64) == 10);  // all in VRAM: the 1000 left
  CHECK(auto_kv_slots(model, 2000, 100, 8, 8) == 8);    // at most the cap (max_batch, 64)
  CHECK(auto_kv_slots(model, 1100, 100, 8, 64) == 2);   // 100 left, but a quarter is 275
  CHECK(auto_kv_slots(model, 400, 30, 8, 64) == 3);     // streamed: a quarter, 100
  CHECK(auto_kv_slots(model, 400, 150, 8, 64) == 1);    // a quarter holds none, the budget one: at least 1
  check_refusal(message_of([&] { auto_kv_slots(model, 400 << 20, 500 << 20, 8, 64); }), "1 sequence(s) of 8 positions, 500.00 MiB");
  // The plan of auto's slots leaves the layers the rest: 2000 - 10 x 100.
  const ModelConfig c = small_config();
  const KvPlan kv = plan_kv(c, dense_model(4, 10000), 10, 0, false, 4 * 10000 + 5 * 2560 + 100, 64);
  CHECK(kv.slots == 5);
  CHECK(kv.auto_slots);
  const ResidencyPlan p = plan_residency(dense_model(4, 10000), {.vram = 4 * 10000 + 5 * 2560 + 100}, kv);
  CHECK(p.count(Tier::kVram) == 4);
}

TEST_CASE("explicit slots the budget cannot hold: the same refusal; auto with the cache in host memory refused") {
  const ModelConfig c = small_config();
  // A slot: 2 x 4 layers x 4096 positions x 16 x 2 bytes = 1 MiB.
  check_refusal(message_of([&] { plan_kv(c, dense_model(4, 100), 4096, 8, false, 4 << 20, 64); }), "8 sequence(s) of 4096 positions, 8.00 MiB");
  CHECK(plan_kv(c, dense_model(4, 100), 4096, 8, false, 8 << 20, 64).bytes == 8ull << 20);  // just fits
  CHECK(plan_kv(c, dense_model(4, 100), 4096, 8, true, 4 << 20, 64).bytes == 8ull << 20);   // in host memory: not the budget's
  const std::string m = message_of([&] { plan_kv(c, dense_model(4, 100), 4096, 0, true, 4 << 20, 64); });
  CHECK(m.find("--max-seqs auto") != std::string::npos);
  CHECK(m.find("--kv-host") != std::string::npos);
}

TEST_CASE("the table and the JSON give the cache: slots, context, bytes, where") {
  const ResidencyPlan p = plan_residency(dense_model(10, 100), {.vram = 350, .ram = 0}, {.slots = 2, .ctx = 10, .bytes = 150, .auto_slots = true});
  const std::string t = plan_table(p);
  INFO(t);
  CHECK(t.find("  KV cache: 2 sequence slot(s) (auto: from the VRAM budget) x 10 positions, 150 B in VRAM (of the VRAM budget 350 B, "
               "layers get 200 B)\n") != std::string::npos);
  const std::string j = plan_json(p);
  INFO(j);
  CHECK(j.find("\"kv\":{\"slots\":2,\"ctx\":10,\"bytes\":150,\"where\":\"VRAM\",\"auto\":true},\"vram_budget_bytes\":350,") != std::string::npos);
  const ResidencyPlan host = plan_residency(dense_model(10, 100), {.vram = 350}, {.slots = 64, .ctx = 10, .bytes = 4800, .host = true});
  CHECK(plan_json(host).find("\"kv\":{\"slots\":64,\"ctx\":10,\"bytes\":4800,\"where\":\"host\",\"auto\":false}") != std::string::npos);
  CHECK(plan_table(host).find("4.69 KiB in pinned host memory (of the VRAM budget 350 B, layers get 350 B)") != std::string::npos);
  CHECK(plan_json(plan_residency(dense_model(2, 1), {})).find("\"kv\":null,") != std::string::npos);
}

TEST_CASE("several GPUs: each caches its own layers, the joined plan the sum") {
  const std::vector<LayerBytes> all = dense_model(4, 100);
  const ResidencyPlan a = plan_range(all, {0, 2}, {.vram = 300}, {.slots = 2, .ctx = 10, .bytes = 60});
  const ResidencyPlan b = plan_range(all, {2, 4}, {.vram = 300}, {.slots = 2, .ctx = 10, .bytes = 60});
  CHECK(range_in_model(a, {0, 2}, 4).kv.bytes == 60);
  const ResidencyPlan j = join_plans({a, b});
  CHECK(j.kv.slots == 2);
  CHECK(j.kv.bytes == 120);
  CHECK(j.vram_budget == 600);
}
