#include <cstdio>

#include "examples/llm/compute/cpu_forward.h"
#include "examples/llm/engine/executor.h"

namespace gpunvme::llm {
namespace {

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(const ModelOnDevice& m, uint32_t n_ctx, bool verify)
      : bytes_(m.file->data_end()), fwd_(m.config, m.weights, bytes_, n_ctx) {
    LoadCheck check(m, verify);  // every byte CRC'd on a host thread while the next is read
    check.read(0, bytes_.size(), bytes_.data());
    check.finish_start();
    verify_ = check.stats();
    layers_ = m.config.n_layer;
  }
  std::span<const float> pass(std::span<const uint32_t> tokens, uint32_t pos0, bool all_logits) override {
    return fwd_.eval_batch(tokens, pos0, all_logits);
  }
  uint32_t max_batch() const override { return UINT32_MAX; }  // buffers grow with the pass
  ExecStats stats() const override {
    ExecStats s;
    s.resident_bytes = bytes_.size();
    s.resident_layers = layers_;
    s.verify = verify_;
    return s;
  }
  std::string describe() const override {
    char b[160];
    std::snprintf(b, sizeof b, "CPU executor: the whole model (%.1f MB) read once into host memory", bytes_.size() / 1e6);
    return b;
  }

 private:
  std::vector<uint8_t> bytes_;
  CpuForward fwd_;
  uint32_t layers_ = 0;
  VerifyStats verify_;
};

}  // namespace

std::unique_ptr<Executor> make_cpu_executor(const ModelOnDevice& m, uint32_t n_ctx, bool verify) {
  return std::make_unique<CpuExecutor>(m, n_ctx, verify);
}

}  // namespace gpunvme::llm
