// BAR0 as the GPU sees it. The emulator's BAR0 is ordinary host memory, so CUDA maps it like any
// pinned buffer; kernels then ring doorbells with plain stores that the controller threads observe.
//
// GPUNVME_EMU_GPU_BAR chooses how, so that every step of the real-drive path runs without a drive:
//   pinned    (default) cudaHostRegisterMapped, as above
//   iomemory  the VFIO transport's own path (host/gpu_bar_access.h: cudaHostRegisterIoMemory), on
//             host memory; where the driver refuses, the caller sees exactly a real refusal
//   refuse    no GPU mapping at all, as on a GPU that cannot write a PCIe BAR
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "host/emulator/controller.h"
#include "host/gpu_bar_access.h"

#if GPUNVME_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gpunvme::emu {
namespace {

enum class GpuBarMode { kPinned, kIoMemory, kRefuse, kInvalid };

GpuBarMode gpu_bar_mode() {
  const char* v = std::getenv("GPUNVME_EMU_GPU_BAR");
  if (v == nullptr || *v == 0 || std::strcmp(v, "pinned") == 0) return GpuBarMode::kPinned;
  if (std::strcmp(v, "iomemory") == 0) return GpuBarMode::kIoMemory;
  if (std::strcmp(v, "refuse") == 0) return GpuBarMode::kRefuse;
  return GpuBarMode::kInvalid;
}

}  // namespace

volatile uint32_t* EmulatedController::bar0_for_gpu(std::string* why) {
  std::lock_guard<std::mutex> lock(gpu_mu_);
  if (gpu_bar0_ != nullptr) return static_cast<volatile uint32_t*>(gpu_bar0_);
  void* host = const_cast<uint32_t*>(bar0_);
  switch (gpu_bar_mode()) {
    case GpuBarMode::kInvalid:
      if (why) *why = "GPUNVME_EMU_GPU_BAR must be pinned, iomemory or refuse";
      return nullptr;
    case GpuBarMode::kRefuse:
      if (why) *why = "the emulated BAR0 refuses GPU mapping (GPUNVME_EMU_GPU_BAR=refuse), as a GPU that cannot map a PCIe BAR";
      return nullptr;
    case GpuBarMode::kIoMemory: {
      volatile uint32_t* dev = host::register_io_memory_for_gpu(host, bar0_bytes_, "emulated BAR0", why);
      gpu_registered_ = dev != nullptr;
      gpu_bar0_ = const_cast<uint32_t*>(dev);
      return dev;
    }
    case GpuBarMode::kPinned: break;
  }
#if GPUNVME_HAVE_CUDA
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
  if (gpu_registered_) host::unregister_io_memory_for_gpu(const_cast<uint32_t*>(bar0_));
  gpu_registered_ = false;
  gpu_bar0_ = nullptr;
}

}  // namespace gpunvme::emu
