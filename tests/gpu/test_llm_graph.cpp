// One-token passes over a model all in GPU memory replay a CUDA graph of their layers (issue 36,
// compute/gpu_graph.h): the logits equal the host-launched passes' to the bit, for every architecture
// rule (dense, qwen3moe's routed experts, gemma3's sliding window, gpt-oss's sinks and MXFP4), across
// two sequences' slots in turn, a prompt pass (not graphed) between them, and a rollback to an earlier
// position; and the replays did run (a graph that never ran would pass the comparison trivially).
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/model_on_device.h"
#include "gpu_rig.h"

using namespace gpunvme;

namespace {

uint32_t argmax_of(std::span<const float> row) { return uint32_t(std::max_element(row.begin(), row.end()) - row.begin()); }

// Every pass's logits, concatenated: slot 0's 4-token prompt, then one-token greedy passes of slots 0
// and 1 in turn, slot 0 rolled back to position 2 and continued.
std::vector<float> script(llm::DeviceSet& set, const llm::ModelOnDevice& m, bool graph, uint64_t* replays) {
  llm::GpuExecOptions o;
  o.resident_layers = m.config.n_layer;
  o.max_seqs = 2;
  o.max_batch = 8;
  o.decode_graph = graph;
  auto ex = llm::make_gpu_executor(set.controllers(), m, 32, o);
  std::vector<float> all;
  auto keep = [&](std::span<const float> l) {
    all.insert(all.end(), l.begin(), l.end());
    return argmax_of(l.last(m.config.n_vocab));
  };
  const std::vector<llm::PassToken> prompt = {{3, 0, 0, false}, {9, 0, 1, false}, {27, 0, 2, false}, {81, 0, 3, true}};
  uint32_t a = keep(ex->pass(prompt)), b = 5, pa = 4, pb = 0;
  for (uint32_t i = 0; i < 6; ++i) {
    const std::vector<llm::PassToken> one = {{a, 0, pa++, true}}, other = {{b, 1, pb++, true}};
    a = keep(ex->pass(one));
    b = keep(ex->pass(other));
  }
  pa = 2;  // the rollback: slot 0 again from position 2
  for (uint32_t i = 0; i < 3; ++i) {
    const std::vector<llm::PassToken> one = {{a, 0, pa++, true}};
    a = keep(ex->pass(one));
  }
  ex->finish();
  *replays = ex->stats().graph_replays;
  return all;
}

}  // namespace

TEST_CASE("llm decode graph: replayed one-token passes give the launched passes' logits, to the bit", "[gpu][llm][graph]") {
  REQUIRE_GPU();
  for (const char* d : {"emu:gen,shape=tiny,type=q4_k", "emu:gen,shape=tiny-qwen3moe,type=q4_k", "emu:gen,shape=tiny-gemma3,type=q6_k",
                        "emu:gen,shape=tiny-gpt-oss,type=mxfp4"}) {
    INFO(d);
    llm::DeviceSet set({d});
    const llm::ModelOnDevice m = llm::open_model(set.namespaces());
    uint64_t off_replays = 0, on_replays = 0;
    const std::vector<float> want = script(set, m, false, &off_replays);
    const std::vector<float> got = script(set, m, true, &on_replays);
    CHECK(off_replays == 0);
    CHECK(on_replays == 14);  // 15 one-token passes, the first launched the ordinary way
    REQUIRE(got.size() == want.size());
    REQUIRE(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
  }
}
