#include "examples/llm/engine/loaded_model.h"

#include <stdexcept>

namespace gpunvme::llm {

LoadedModel::LoadedModel(const std::vector<std::string>& devices) : set(devices), model(open_model(set.namespaces())) {
  if (model.vocab.model != "none") tok_ = std::make_unique<Tokenizer>(model.vocab);
}

const Tokenizer& LoadedModel::tokenizer() const {
  if (!tok_) throw std::runtime_error("the model has no vocabulary (tokenizer.ggml.model = none): give token ids");
  return *tok_;
}

std::unique_ptr<Executor> LoadedModel::executor(bool gpu, uint32_t n_ctx, const GpuExecOptions& o) {
  if (gpu) {
    const std::vector<host::Controller*> ctrls = set.controllers();
    return make_gpu_executor(ctrls, model, n_ctx, o);
  }
  return make_cpu_executor(model, n_ctx, CpuExecOptions{.verify = o.verify, .max_seqs = o.max_seqs});
}

}  // namespace gpunvme::llm
