// Builds without CUDA: the GPU executor cannot exist; say so instead of failing to link.
#include <stdexcept>

#include "examples/llm/engine/executor.h"

namespace gpunvme::llm {

void check_gpus_here(uint32_t, std::span<const int>) {
  throw std::runtime_error("this build has no CUDA (meson setup -Dcuda=enabled with nvcc on PATH builds the GPU executor)");
}

std::unique_ptr<Executor> make_gpu_executor(host::Controller&, const ModelOnDevice&, uint32_t,
                                            const GpuExecOptions&) {
  throw std::runtime_error("this build has no CUDA (meson setup -Dcuda=enabled with nvcc on PATH builds the GPU executor)");
}

std::unique_ptr<Executor> make_gpu_executor(std::span<host::Controller* const>, const ModelOnDevice&, uint32_t,
                                            const GpuExecOptions&) {
  throw std::runtime_error("this build has no CUDA (meson setup -Dcuda=enabled with nvcc on PATH builds the GPU executor)");
}

}  // namespace gpunvme::llm
