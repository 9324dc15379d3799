// The GPU executor's KV cache in the residency plan (issue 37): --max-seqs auto (max_seqs 0) gets the
// slots auto_kv_slots gives for the VRAM budget, the plan counts the cache the executor allocated
// (kv_cache_shape.h's bytes) and leaves the layers the rest, a count the budget cannot hold is refused
// before anything is allocated, and the sequences of auto's slots get their logits alone, to the bit.
// The grouped MoE buffers only where a pass can take them (grouped_moe_used).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "examples/llm/compute/gpu_forward.h"
#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/model_on_device.h"
#include "gpu_rig.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr uint32_t kCtx = 64;

uint32_t argmax_of(std::span<const float> row) { return uint32_t(std::max_element(row.begin(), row.end()) - row.begin()); }

uint64_t model_bytes(const std::vector<llm::LayerBytes>& b) {
  uint64_t s = 0;
  for (const llm::LayerBytes& l : b) s += l.dense + l.experts;
  return s;
}

// Prompt {3, 5, 7} then `decode` greedy tokens of slot `seq`, its rows (one pass each) with the other
// slots given the same script shifted by their slot number, or alone.
std::vector<std::vector<float>> rows_of(llm::Executor& ex, uint32_t n_vocab, uint32_t seqs, uint32_t decode) {
  std::vector<std::vector<float>> rows;
  std::vector<uint32_t> tok(seqs);
  for (uint32_t pos = 0; pos < 3 + decode; ++pos) {
    std::vector<llm::PassToken> pass;
    for (uint32_t s = 0; s < seqs; ++s) pass.push_back({pos < 3 ? 3 + 2 * pos + s : tok[s], s, pos, pos >= 2});
    const std::span<const float> l = ex.pass(pass);
    if (pos < 2) continue;
    for (uint32_t s = 0; s < seqs; ++s) tok[s] = argmax_of(l.subspan(uint64_t(s) * n_vocab, n_vocab));
    rows.emplace_back(l.begin(), l.begin() + n_vocab);  // slot 0's
  }
  return rows;
}

}  // namespace

TEST_CASE("llm kv plan: --max-seqs auto sizes the slots from the VRAM budget, the plan counts the cache", "[gpu][llm][seqs][kv]") {
  REQUIRE_GPU();
  llm::DeviceSet set({"emu:gen,shape=tiny-qwen3moe,type=q4_k"});
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  const std::vector<llm::LayerBytes> bytes = llm::layer_bytes(m);
  const uint64_t slot = llm::kv_slot_bytes(m.config, m.config.n_layer, kCtx);
  llm::GpuExecOptions o;
  o.max_batch = 8;
  // Half the model and three slots' worth: a streamed model, the cache a quarter of the budget.
  const uint64_t budget = model_bytes(bytes) / 2 + 3 * slot;
  o.vram_budget = budget;
  o.max_seqs = 0;
  auto ex = llm::make_gpu_executor(set.controllers(), m, kCtx, o);
  const uint32_t want = llm::auto_kv_slots(bytes, budget, slot, kCtx, 8);
  CHECK(want >= 2);
  REQUIRE(ex->max_seqs() == want);
  const llm::ResidencyPlan& p = ex->stats().plan;
  CHECK(p.kv.slots == want);
  CHECK(p.kv.ctx == kCtx);
  CHECK(p.kv.bytes == want * slot);
  CHECK(p.kv.auto_slots);
  CHECK_FALSE(p.kv.host);
  CHECK(p.vram_budget == budget);
  CHECK(p.placed_bytes(llm::Tier::kVram) <= budget - p.kv.bytes);
  CHECK_THAT(llm::plan_json(p), ContainsSubstring("\"kv\":{\"slots\":" + std::to_string(want) + ",\"ctx\":64,\"bytes\":" +
                                                  std::to_string(want * slot) + ",\"where\":\"VRAM\",\"auto\":true}"));
  // Slot 0 beside the others: its rows alone, to the bit.
  const auto together = rows_of(*ex, m.config.n_vocab, want, 4);
  ex->finish();
  ex.reset();
  o.max_seqs = 1;
  auto one = llm::make_gpu_executor(set.controllers(), m, kCtx, o);
  const auto alone = rows_of(*one, m.config.n_vocab, 1, 4);
  one->finish();
  REQUIRE(together.size() == alone.size());
  for (size_t i = 0; i < alone.size(); ++i) REQUIRE(std::memcmp(together[i].data(), alone[i].data(), alone[i].size() * sizeof(float)) == 0);
}

TEST_CASE("llm kv plan: slots the VRAM budget cannot hold are refused, naming the fixes", "[gpu][llm][seqs][kv]") {
  REQUIRE_GPU();
  llm::DeviceSet set({"emu:gen,shape=tiny,type=q4_k"});
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  const uint64_t slot = llm::kv_slot_bytes(m.config, m.config.n_layer, kCtx);
  llm::GpuExecOptions o;
  o.vram_budget = 3 * slot;
  o.max_seqs = 4;
  REQUIRE_THROWS_WITH(llm::make_gpu_executor(set.controllers(), m, kCtx, o),
                      ContainsSubstring("the KV cache (4 sequence(s) of 64 positions") && ContainsSubstring("does not fit in GPU memory: the VRAM budget is") &&
                          ContainsSubstring("--kv-host") && ContainsSubstring("a larger --vram-budget"));
  o.max_seqs = 0;
  o.vram_budget = slot - 1;
  REQUIRE_THROWS_WITH(llm::make_gpu_executor(set.controllers(), m, kCtx, o), ContainsSubstring("the KV cache (1 sequence(s)") &&
                                                                                 ContainsSubstring("--max-seqs auto sizes the cache from it"));
  o.max_seqs = 3;  // fits: the plan's layers get nothing, the executor runs
  o.vram_budget = 3 * slot;
  auto ex = llm::make_gpu_executor(set.controllers(), m, kCtx, o);
  CHECK(ex->stats().plan.count(llm::Tier::kVram) == 0);
  CHECK(ex->stats().plan.kv.bytes == 3 * slot);
  ex->finish();
}

TEST_CASE("llm kv plan: grouped MoE buffers only where a pass can group experts", "[gpu][llm][kv]") {
  REQUIRE_GPU();
  llm::DeviceSet set({"emu:gen,shape=tiny-qwen3moe,type=q4_k"});
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  const llm::ModelConfig& c = m.config;
  const char* env = std::getenv("GPUNVME_MOE_GROUP_FETCHED");
  const bool fetched_on = !env || std::strcmp(env, "0") != 0;
  CHECK(llm::grouped_moe_used(c, 33, true, false));        // a prompt segment on the fast kernels
  CHECK_FALSE(llm::grouped_moe_used(c, 33, false, false));  // the small kernels only, every expert in VRAM
  CHECK_FALSE(llm::grouped_moe_used(c, 8, true, false));    // no pass of more than 32 tokens, experts in VRAM
  CHECK(llm::grouped_moe_used(c, 8, true, true) == fetched_on);  // several sequences' fetched experts
  CHECK_FALSE(llm::grouped_moe_used(c, 1, true, true));
  llm::ModelConfig dense = c;
  dense.n_expert = dense.n_expert_used = 0;
  CHECK_FALSE(llm::grouped_moe_used(dense, 512, true, true));
}
