// A model opened for running, as the llm tool and the Python bindings (runtime/python) both start: its
// namespaces held with readers' locks (DeviceSet), the model found on them, its tokenizer, and the
// executor that computes it. One place, so the two open a device and pick an executor the same way.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/model_on_device.h"
#include "examples/llm/tokenizer/tokenizer.h"

namespace gpunvme::llm {

struct LoadedModel {
  // `devices`: one device string, or a striped set's members in order. Throws std::runtime_error naming
  // what is wrong (no such device, no model on it, an unfinished deploy, an unsupported architecture).
  explicit LoadedModel(const std::vector<std::string>& devices);

  // The model's tokenizer; throws when it has none (tokenizer.ggml.model = none: token ids only).
  const Tokenizer& tokenizer() const;
  bool has_tokenizer() const { return tok_ != nullptr; }
  // The GPU executor (`gpu`) streaming through this set's controllers, or the CPU executor (which
  // takes only o.verify and o.max_seqs from `o`), for contexts of n_ctx positions.
  std::unique_ptr<Executor> executor(bool gpu, uint32_t n_ctx, const GpuExecOptions& o);

  DeviceSet set;  // first: the model reads through it
  ModelOnDevice model;

 private:
  std::unique_ptr<Tokenizer> tok_;
};

}  // namespace gpunvme::llm
