// The one exception type of the GGUF reader and the model-on-device pieces built on it.
// Messages name what is wrong, where (byte offset, tensor, key) and, where there is one, the fix.
#pragma once
#include <stdexcept>
#include <string>

namespace gpunvme::gguf {

class GgufError : public std::runtime_error {
 public:
  explicit GgufError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace gpunvme::gguf
