// The engine's GPU tests' model: a generated 3-layer model (so that every tier can hold one layer;
// dense, or `experts` experts of which 2 are routed) deployed onto a temporary emulated namespace,
// opened as the engine opens it, and six greedy steps of a GPU executor over it.
#pragma once
#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "examples/llm/engine/executor.h"
#include "examples/llm/tools/generated_model.h"
#include "host/open_device.h"
#include "runtime/deploy/deploy.h"

namespace gpunvme::test {

struct DeployedModel {
  std::string image;
  std::string device;  // the emu: string that opens it (its block size)
  explicit DeployedModel(uint32_t experts, const std::string& name = "tiers-test", uint32_t lba_size = 512) {
    char path[] = "/tmp/gpunvme-llm-tiers-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    image = path;
    device = "emu:" + image + (lba_size == 512 ? "" : ",lba=" + std::to_string(lba_size));
    llm::gen::Shape s{name, 3, 256, 4, 2, 512, 512, 512, experts, experts ? 2u : 0u, 10000.0f};
    llm::gen::GeneratedModel model(llm::gen::model_layout(s, uint32_t(gguf::GgmlType::Q4_K), s.name), 5, 2);
    deploy::Device dev(device + ",size=32M");
    deploy::deploy_source(dev, model, s.name);
  }
  ~DeployedModel() { std::remove(image.c_str()); }
};

struct Opened {
  std::unique_ptr<host::Controller> ctrl;
  std::unique_ptr<host::QueuePair> qp;
  std::unique_ptr<host::CpuIo> io;
  llm::ModelOnDevice m;
  explicit Opened(const std::string& device) {
    ctrl = host::open_controller(device, {}, host::Access::kReadOnly);
    qp = ctrl->create_io_queue_pair(1, 64);
    io = std::make_unique<host::CpuIo>(*ctrl, *qp, 1);
    m = llm::open_model(*ctrl, *io);
  }
};

// The KV cache run() allocates in GPU memory (one slot of 8 positions): a VRAM budget's first bytes
// (residency_plan.h), so a budget meant for N layers' bytes is those bytes and this.
inline uint64_t run_kv_bytes(const llm::ModelOnDevice& m) { return llm::kv_cache_bytes(m.config, llm::KvCacheShape{}, 8); }

// Every layer's dense bytes (all but the routed experts): a budget of these plus the KV cache keeps the
// dense parts in VRAM and leaves every layer's experts to be fetched.
inline uint64_t dense_bytes(const llm::ModelOnDevice& m) {
  uint64_t dense = 0;
  for (const llm::LayerBytes& b : llm::layer_bytes(m)) dense += b.dense;
  return dense;
}

// Six greedy steps' logits from token 3; the stats at the end (and, given, after the first step).
inline std::vector<std::vector<float>> run(host::Controller& c, const llm::ModelOnDevice& m, const llm::GpuExecOptions& o,
                                           llm::ExecStats* stats, llm::ExecStats* after_first = nullptr) {
  auto ex = llm::make_gpu_executor(c, m, 8, o);
  std::vector<std::vector<float>> out;
  uint32_t tok = 3;
  for (uint32_t pos = 0; pos < 6; ++pos) {
    const std::span<const float> logits = ex->step(tok, pos);
    out.emplace_back(logits.begin(), logits.end());
    tok = uint32_t(std::max_element(out.back().begin(), out.back().end()) - out.back().begin());
    if (pos == 0 && after_first) *after_first = ex->stats();
  }
  ex->finish();
  *stats = ex->stats();
  return out;
}

}  // namespace gpunvme::test
