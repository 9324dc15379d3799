#include "host/cuda_device.h"

#if GPUNVME_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gpunvme::host {

bool cuda_device_available(std::string* why) {
#if GPUNVME_HAVE_CUDA
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? std::string("CUDA reports: ") + cudaGetErrorString(e) : "no CUDA GPU present";
    return false;
  }
  return true;
#else
  if (why) *why = "gpunvme was built without CUDA (meson option -Dcuda=enabled needs nvcc)";
  return false;
#endif
}

}  // namespace gpunvme::host
