// Who computes a token: the CPU executor (weights read once into host memory; the reference, and
// what runs without a GPU) or the GPU executor (resident layers in GPU memory, the rest streamed per
// token into slots by GPU-issued NVMe reads while the previous layer computes). The generation loop
// (generate.cpp) is written once over this interface.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "examples/llm/engine/model_on_device.h"

namespace gpunvme::llm {

struct ExecStats {
  uint64_t streamed_bytes = 0;   // read from the namespace during tokens (not at start)
  double io_seconds = 0;         // GPU time spent on those reads (sum over layers)
  double stall_seconds = 0;      // compute waited for I/O
  uint64_t resident_bytes = 0;   // read once at start
  uint64_t bytes_per_step = 0;   // weight bytes streamed for one token (every streamed layer once)
  uint32_t resident_layers = 0, streamed_layers = 0;
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

struct GpuExecOptions {
  uint32_t resident_layers = 0;  // the first N layers live in GPU memory; the rest stream
  uint32_t slots = 2;            // streaming slots (double buffering: 2)
  uint32_t queues = 4;           // GPU-driven NVMe queues (the streamer's; MoE: as many again for the expert fetcher)
  uint64_t expert_cache_bytes = 0;  // MoE: LRU cache of fetched experts (0: none, experts read every token)
};

// CUDA builds with a GPU; otherwise throws naming why.
std::unique_ptr<Executor> make_gpu_executor(host::Controller& c, const ModelOnDevice& m, uint32_t n_ctx,
                                            const GpuExecOptions& o);

}  // namespace gpunvme::llm
