// BAR0 as the GPU sees it. The emulator's BAR0 is ordinary host memory, so CUDA maps it like any
// pinned buffer; kernels then ring doorbells with plain stores that the controller threads observe.
#include <mutex>

#include "host/emulator/controller.h"

#if GPUNVME_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gpunvme::emu {

volatile uint32_t* EmulatedController::bar0_for_gpu(std::string* why) {
#if GPUNVME_HAVE_CUDA
  std::lock_guard<std::mutex> lock(gpu_mu_);
  if (gpu_bar0_ != nullptr) return static_cast<volatile uint32_t*>(gpu_bar0_);
  void* host = const_cast<uint32_t*>(bar0_);
  cudaError_t err = cudaHostRegister(host, bar0_bytes_, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    if (why) *why = std::string("cudaHostRegister(emulated BAR0) failed: ") + cudaGetErrorString(err);
    cudaGetLastError();
    return nullptr;
  }
  gpu_registered_ = true;
  void* dev = nullptr;
  err = cudaHostGetDevicePointer(&dev, host, 0);
  if (err != cudaSuccess) {
    if (why) *why = std::string("cudaHostGetDevicePointer(emulated BAR0) failed: ") + cudaGetErrorString(err);
    cudaGetLastError();
    return nullptr;
  }
  gpu_bar0_ = dev;
  return static_cast<volatile uint32_t*>(dev);
#else
  if (why) *why = "this build has no CUDA (configure with -Dcuda=enabled on a machine with nvcc)";
  return nullptr;
#endif
}

void EmulatedController::unregister_gpu() noexcept {
#if GPUNVME_HAVE_CUDA
  if (gpu_registered_) cudaHostUnregister(const_cast<uint32_t*>(bar0_));
  gpu_registered_ = false;
  gpu_bar0_ = nullptr;
#endif
}

}  // namespace gpunvme::emu
