// Who computes a token: the CPU executor (weights read once into host memory; the reference, and
// what runs without a GPU) or the GPU executor (resident layers in GPU memory, the rest streamed per
// token into slots by GPU-issued NVMe reads while the previous layer computes). The generation loop
// (generate.cpp) is written once over this interface.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "examples/llm/compute/gpu_forward.h"
#include "examples/llm/engine/model_on_device.h"
#include "examples/llm/engine/expert_lag.h"
#include "examples/llm/engine/residency_plan.h"
#include "runtime/stream/expert_fetcher.h"

namespace gpunvme::llm {

struct ExecStats {
  uint64_t streamed_bytes = 0;   // read from the namespace during tokens (not at start)
  double io_seconds = 0;         // GPU time spent on those reads (sum over layers)
  double stall_seconds = 0;      // compute waited for I/O
  uint64_t resident_bytes = 0;   // read once at start into GPU memory
  uint64_t bytes_per_step = 0;   // weight bytes streamed for one token (every streamed layer once)
  uint64_t ram_bytes = 0;        // RAM tier: pinned host memory read once at start
  uint64_t ram_bytes_per_step = 0, ram_copied_bytes = 0;  // copied to the GPU per token / in all
  uint32_t resident_layers = 0, ram_layers = 0, streamed_layers = 0;
  ResidencyPlan plan;            // GPU executor: where every layer lives
  bool has_experts = false;      // the fetcher ran (MoE with experts not in VRAM)
  stream::FetcherMetrics experts;
  LagCounts lag;                 // how a one-token-lag prefetch would have done (expert_lag.h)
};

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs `token` at position `pos` (0, 1, 2, ... in order) through every layer; returns the logits.
  virtual const std::vector<float>& step(uint32_t token, uint32_t pos) = 0;
  // Ends all outstanding work (bounded) and reports any I/O error; called once after the last step.
  virtual void finish() {}
  virtual ExecStats stats() const = 0;
  virtual std::string describe() const = 0;
};

std::unique_ptr<Executor> make_cpu_executor(const ModelOnDevice& m, uint32_t n_ctx);

// Dense layer bytes that reach the GPU per token by some way of copying (the RAM tier, ram_tier.h; the
// benchmark's mmap baseline), layers in order and cyclic across tokens: acquire() makes `compute` wait
// for the next layer and returns where it is; release() lets its buffer be reused after the kernels
// enqueued on `compute` so far.
class LayerSource {
 public:
  virtual ~LayerSource() = default;
  virtual WeightView acquire(gpu_stream_t compute) = 0;
  virtual void release(gpu_stream_t compute) = 0;
  virtual void sync() {}  // waits (bounded) for copies still running
};
// Makes a LayerSource for the NVMe tier's layers (their byte ranges, in order), instead of GPU-issued reads.
using LayerSourceFactory = std::function<std::unique_ptr<LayerSource>(std::vector<ByteRange> ranges)>;

struct GpuExecOptions {
  std::optional<uint32_t> resident_layers;  // --resident N: the first N layers whole in GPU memory, the rest stream
  // The residency plan's budgets (when resident_layers is not given). VRAM: default what the GPU has
  // free after the globals, KV cache and activations, less the RAM tier's buffers and a reserve.
  std::optional<uint64_t> vram_budget;
  uint64_t ram_budget = 0;
  uint32_t slots = 2;            // streaming slots (double buffering: 2)
  uint32_t queues = 4;           // GPU-driven NVMe queues (the streamer's; MoE: as many again for the expert fetcher)
  std::optional<uint64_t> expert_cache_bytes;  // MoE: LRU cache of fetched experts (default: the plan's, from the RAM budget)
  LayerSourceFactory nvme_source;  // set: the NVMe tier's dense bytes come from it (bench/llm_tokens' mmap baseline)
};

// CUDA builds with a GPU; otherwise throws naming why.
std::unique_ptr<Executor> make_gpu_executor(host::Controller& c, const ModelOnDevice& m, uint32_t n_ctx,
                                            const GpuExecOptions& o);

}  // namespace gpunvme::llm
