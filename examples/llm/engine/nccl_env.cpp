#include "examples/llm/engine/nccl_env.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace gpunvme::llm {

void disable_nvls() {
  if (const char* v = std::getenv(kNvlsVariable)) {
    if (std::string(v) != "0")
      throw std::runtime_error(std::string(kNvlsVariable) + "=" + v +
                               ": NVLink multicast must stay off (it can take shared GPUs out of service): unset it or set it to 0");
    return;
  }
  if (setenv(kNvlsVariable, "0", 0) != 0) throw std::runtime_error(std::string("setenv ") + kNvlsVariable + " failed");
}

}  // namespace gpunvme::llm
