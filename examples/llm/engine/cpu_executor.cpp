#include <cstdio>

#include "examples/llm/compute/cpu_forward.h"
#include "examples/llm/engine/executor.h"

namespace gpunvme::llm {
namespace {

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(const ModelOnDevice& m, uint32_t n_ctx)
      : bytes_(m.file->data_end()), fwd_(m.config, m.weights, bytes_, n_ctx) {
    read_model_bytes(m, 0, bytes_.size(), bytes_.data());
    layers_ = m.config.n_layer;
  }
  const std::vector<float>& step(uint32_t token, uint32_t pos) override { return fwd_.eval(token, pos); }
  ExecStats stats() const override {
    ExecStats s;
    s.resident_bytes = bytes_.size();
    s.resident_layers = layers_;
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
};

}  // namespace

std::unique_ptr<Executor> make_cpu_executor(const ModelOnDevice& m, uint32_t n_ctx) {
  return std::make_unique<CpuExecutor>(m, n_ctx);
}

}  // namespace gpunvme::llm
