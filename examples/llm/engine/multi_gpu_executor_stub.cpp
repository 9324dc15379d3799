// A build without NCCL (or without CUDA): --gpus above 1 is refused, naming the fix.
#include <stdexcept>

#include "examples/llm/engine/multi_gpu_executor.h"

namespace gpunvme::llm {

std::unique_ptr<Executor> make_multi_gpu_executor(std::span<host::Controller* const>, const ModelOnDevice&, uint32_t,
                                                  const GpuExecOptions& o) {
  throw std::runtime_error("--gpus " + std::to_string(o.gpus) +
                           ": this build has no NCCL (nccl.h and libnccl, found beside CUDA): install NCCL "
                           "(libnccl-dev, or the CUDA toolkit's) and reconfigure the build, or use --gpus 1");
}

}  // namespace gpunvme::llm
