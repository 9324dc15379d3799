#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>

#include "examples/llm/compute/cpu_forward.h"
#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/host_memory.h"
#include "host/text/human_bytes.h"

namespace gpunvme::llm {
namespace {

// The CPU executor holds the whole model and an f32 KV cache in host memory. What cannot fit is refused
// up front, naming what takes how much (--ctx sizes the cache), instead of a bad_alloc or the OOM killer.
void check_host_memory(const ModelOnDevice& m, uint32_t n_ctx, uint32_t n_seqs) {
  const uint64_t kv = 2ull * m.config.n_layer * n_seqs * n_ctx * m.config.kv_dim() * sizeof(float);
  const uint64_t model = m.file->data_end(), need = model + kv;
  const std::optional<uint64_t> avail = available_memory();
  if (!avail || need <= *avail) return;
  throw std::runtime_error("the CPU executor needs " + text::human_bytes(double(need)) + " of host memory (the model " +
                           text::human_bytes(double(model)) + ", the KV cache for a context of " + std::to_string(n_ctx) +
                           " tokens" + (n_seqs > 1 ? " times " + std::to_string(n_seqs) + " sequences " : " ") +
                           text::human_bytes(double(kv)) + ") and " + text::human_bytes(double(*avail)) +
                           " is available: " + (kv > *avail / 2 ? (n_seqs > 1 ? "a smaller --ctx or fewer sequences" : "a smaller --ctx") : "the GPU path (--path gpu)"));
}

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(const ModelOnDevice& m, uint32_t n_ctx, const CpuExecOptions& o)
      : bytes_(m.file->data_end()), fwd_(m.config, m.weights, bytes_, n_ctx, o.max_seqs, o.max_batch), max_batch_(o.max_batch) {
    LoadCheck check(m, o.verify);  // read by the start's reader (model_reader.h), every piece CRC'd by its worker
    check.read(0, bytes_.size(), bytes_.data());
    check.finish_start();
    verify_ = check.stats();
    layers_ = m.config.n_layer;
  }
  std::span<const float> pass(std::span<const PassToken> tokens) override { return fwd_.eval_batch(tokens); }
  uint32_t max_batch() const override { return max_batch_ ? max_batch_ : UINT32_MAX; }  // 0: the buffers grow with the pass
  uint32_t max_seqs() const override { return fwd_.n_seqs(); }
  void end_sequence(uint32_t seq) override { fwd_.free_seq(seq); }
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
  uint32_t max_batch_;
  uint32_t layers_ = 0;
  VerifyStats verify_;
};

}  // namespace

std::unique_ptr<Executor> make_cpu_executor(const ModelOnDevice& m, uint32_t n_ctx, const CpuExecOptions& o) {
  check_host_memory(m, n_ctx, o.max_seqs);
  return std::make_unique<CpuExecutor>(m, n_ctx, o);
}

}  // namespace gpunvme::llm
