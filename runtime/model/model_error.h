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

}  // namespace gpunvme::model
