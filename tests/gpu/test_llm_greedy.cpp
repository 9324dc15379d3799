// The greedy pick on the GPU (issue 36, compute/gpu_argmax.h) and on the host (sampler.h's
// greedy_pick) make the same decision on every row: ties (the lowest index, +0 and -0 alike), NaN
// (skipped, or 0 when first), -inf and +inf, a 262k vocabulary and rows longer than one sweep of the
// kernel's blocks; and generate() picking on the GPU (GenerateOptions::token_logits false) gives the
// tokens of the host's picks from the copied rows, prompt chunks and graphed decode passes alike.
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <limits>
#include <random>
#include <set>
#include <algorithm>
#include <string>
#include <vector>

#include "device_array.h"
#include "examples/llm/compute/gpu_argmax.h"
#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/generate.h"
#include "examples/llm/engine/model_on_device.h"
#include "examples/llm/engine/sampler.h"
#include "gpu_rig.h"

using namespace gpunvme;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> normal_row(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 4.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The GPU's pick of `row`, launched twice on one GpuArgmax (the second finds its counter reset).
llm::GreedyPick gpu_pick(llm::GpuArgmax& a, const std::vector<float>& row) {
  test::DeviceArray<float> d(row);
  llm::GreedyPick first;
  for (int i = 0; i < 2; ++i) {
    a.enqueue(nullptr, d.p, uint32_t(row.size()));
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    if (i == 0) first = a.host();
    CHECK(a.host().id == first.id);
  }
  return first;
}

}  // namespace

TEST_CASE("llm greedy pick: the GPU's argmax and finiteness are the host's, ties, NaN and Inf included", "[gpu][llm][greedy]") {
  REQUIRE_GPU();
  llm::GpuArgmax a;
  constexpr size_t kVocab = 262144;  // Gemma 3's
  struct Case {
    std::string name;
    std::vector<float> row;
    uint32_t id;       // what the rule says
    uint32_t non_finite;
  };
  std::vector<Case> cases;
  {
    std::vector<float> r = normal_row(kVocab, 1);
    const uint32_t best = uint32_t(std::max_element(r.begin(), r.end()) - r.begin());
    cases.push_back({"262k normal", r, best, 0});
    for (uint32_t i : {5u, 100000u, 262143u}) r[i] = 100.0f;  // a three-way tie: the first
    cases.push_back({"262k tie", r, 5, 0});
    r[0] = kNaN;  // a NaN first: 0
    cases.push_back({"262k NaN first", r, 0, 1});
    r[0] = 1.0f, r[7] = kNaN, r[262142] = kNaN;  // NaNs elsewhere are skipped
    cases.push_back({"262k NaN inside", r, 5, 1});
    r[7] = 1.0f, r[262142] = 1.0f, r[200001] = kInf, r[200000] = kInf;
    cases.push_back({"262k +inf twice", r, 200000, 1});
    r[200001] = r[200000] = -kInf;
    cases.push_back({"262k -inf inside", r, 5, 1});
    r.back() = 1000.0f;
    cases.push_back({"262k last", r, 262143, 1});
  }
  cases.push_back({"all -inf", std::vector<float>(kVocab, -kInf), 0, 1});
  cases.push_back({"all NaN", std::vector<float>(4099, kNaN), 0, 1});
  {
    std::vector<float> r(kVocab, -kInf);
    r[131072] = -3.0f;
    cases.push_back({"-inf but one", r, 131072, 1});
    std::vector<float> z(kVocab, -1.0f);
    z[9] = -0.0f, z[4] = 0.0f, z[70000] = 0.0f;  // +0 == -0: the first of them
    cases.push_back({"signed zeros", z, 4, 0});
    z[4] = -1.0f;
    cases.push_back({"signed zeros, -0 first", z, 9, 0});
  }
  cases.push_back({"one value", {2.5f}, 0, 0});
  cases.push_back({"one NaN", {kNaN}, 0, 1});
  {
    std::vector<float> r = normal_row(33, 2);
    r[32] = 50.0f;
    cases.push_back({"33 values", r, 32, 0});
    std::vector<float> big = normal_row(1000003, 3);  // several sweeps of the blocks: indices past 2^19
    big[777777] = 60.0f, big[999999] = 60.0f;
    cases.push_back({"1000003 values", big, 777777, 0});
  }
  for (const Case& c : cases) {
    INFO(c.name);
    const llm::GreedyPick host = llm::greedy_pick(c.row);
    CHECK(host.id == c.id);  // the rule, on the host (the sampler's argmax)
    CHECK(host.non_finite == c.non_finite);
    const llm::GreedyPick gpu = gpu_pick(a, c.row);
    CHECK(gpu.id == host.id);
    CHECK(gpu.non_finite == host.non_finite);
  }
}

namespace {

enum class Picks { kHost, kGpu, kChained };  // host from copied rows; pass_greedy; submit/collect_greedy

// generate() over a GPU executor: greedy, `n` tokens after a 5-token prompt in chunks of 2.
llm::GenerateResult run_generate(llm::Executor& ex, Picks picks, uint32_t n, const std::set<uint32_t>& eog,
                                 std::vector<std::vector<float>>* rows) {
  llm::Sampler greedy(llm::SamplerOptions{});
  llm::GenerateOptions g;
  g.batch = 2;
  g.token_logits = picks == Picks::kHost;
  const std::vector<uint32_t> prompt = {3, 9, 27, 81, 7};
  return llm::generate(ex, prompt, n, greedy, eog, g, [&](uint32_t, std::span<const float> logits) {
    if (g.token_logits) rows->emplace_back(logits.begin(), logits.end());
    else CHECK(logits.empty());  // nothing copied to the host
  });
}

std::unique_ptr<llm::Executor> executor(llm::DeviceSet& set, const llm::ModelOnDevice& m, bool graph, bool chain) {
  llm::GpuExecOptions o;
  o.resident_layers = m.config.n_layer;
  o.max_batch = 2;
  o.decode_graph = graph;
  o.decode_chain = chain;
  return llm::make_gpu_executor(set.controllers(), m, 64, o);
}

}  // namespace

TEST_CASE("llm greedy pick: generate() picking on the GPU, chained or not, gives the host's tokens from the copied logits",
          "[gpu][llm][greedy]") {
  REQUIRE_GPU();
  for (const char* d : {"emu:gen,shape=tiny,type=q4_k", "emu:gen,shape=tiny-gemma3,type=q6_k", "emu:gen,shape=tiny-qwen3moe,type=q4_k"}) {
    for (bool graph : {true, false}) {
      INFO(d << (graph ? " (decode graph)" : " (launched)"));
      llm::DeviceSet set({d});
      const llm::ModelOnDevice m = llm::open_model(set.namespaces());
      constexpr uint32_t kTokens = 24;
      std::vector<std::vector<float>> rows;
      const llm::GenerateResult host = run_generate(*executor(set, m, graph, false), Picks::kHost, kTokens, {}, &rows);
      REQUIRE(host.tokens.size() == kTokens);
      REQUIRE(rows.size() == kTokens);
      CHECK(host.decode_steps == kTokens - 1);
      // The host's tokens are the rule's picks of the rows it saw (not a constant sequence by accident).
      for (size_t i = 0; i < rows.size(); ++i) CHECK(host.tokens[i] == llm::greedy_pick(rows[i]).id);
      CHECK(std::set<uint32_t>(host.tokens.begin(), host.tokens.end()).size() > 1);
      for (Picks p : {Picks::kGpu, Picks::kChained}) {
        INFO((p == Picks::kGpu ? "GPU picks" : "chained GPU picks"));
        const auto ex = executor(set, m, graph, p == Picks::kChained);
        CHECK(ex->chains() == (p == Picks::kChained));
        const llm::GenerateResult gpu = run_generate(*ex, p, kTokens, {}, nullptr);
        CHECK(gpu.tokens == host.tokens);
        CHECK(gpu.decode_steps == kTokens - 1);
        CHECK(gpu.exec.graph_replays == host.exec.graph_replays);
        if (graph) CHECK(gpu.exec.graph_replays > 0);
        // An end-of-generation token at the 9th: the same tokens up to it; a chained pass run ahead of
        // it is dropped, and the same executor then generates the host's tokens again from position 0.
        const uint32_t end = host.tokens[8];
        const size_t first_end = size_t(std::find(host.tokens.begin(), host.tokens.end(), end) - host.tokens.begin());
        const llm::GenerateResult stop = run_generate(*ex, p, kTokens, {end}, nullptr);
        CHECK(stop.stopped_at_eos);
        CHECK(stop.tokens == std::vector<uint32_t>(host.tokens.begin(), host.tokens.begin() + first_end + 1));
        std::vector<std::vector<float>> again_rows;
        const llm::GenerateResult again = run_generate(*ex, Picks::kHost, kTokens, {}, &again_rows);
        CHECK(again.tokens == host.tokens);
        REQUIRE(again_rows.size() == rows.size());
        for (size_t i = 0; i < rows.size(); ++i) CHECK(std::memcmp(again_rows[i].data(), rows[i].data(), rows[i].size() * sizeof(float)) == 0);
      }
    }
  }
}
