// Errors of the model-on-device pieces (LBA map, deploy record, detection). GGUF parse errors stay
// gguf::GgufError; both derive from std::runtime_error and name the problem, the place and the fix.
#pragma once
#include <stdexcept>
#include <string>

namespace gpunvme::model {

class ModelError : public std::runtime_error {
 public:
  explicit ModelError(const std::string& what) : std::runtime_error(what) {}
};

// The device holds an in-progress deploy record: a deploy was interrupted, failed, or is still
// running, so the model bytes behind the record are incomplete. Readers refuse the model.
class UnfinishedDeployError : public ModelError {
 public:
  using ModelError::ModelError;
};

}  // namespace gpunvme::model
