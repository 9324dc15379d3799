#include "runtime/stream/cuda_owned.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "device/cuda_check.h"

namespace gpunvme::stream {

using device::check_cuda;

void CudaFree::operator()(void* p) const noexcept { cudaFree(p); }
void CudaEventDestroy::operator()(CUevent_st* e) const noexcept { cudaEventDestroy(e); }
void CudaStreamDestroy::operator()(CUstream_st* s) const noexcept { cudaStreamDestroy(s); }

DeviceMemory device_malloc(size_t bytes, const char* what) {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, std::max<size_t>(bytes, 1)), what);
  return DeviceMemory(p);
}

CudaEvent make_event(const char* what) {
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), what);
  return CudaEvent(e);
}

CudaStream make_priority_stream(const char* what) {
  int lo = 0, hi = 0;
  check_cuda(cudaDeviceGetStreamPriorityRange(&lo, &hi), what);
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, hi), what);
  return CudaStream(s);
}

void DeviceArena::upload(void* dst, const void* src, size_t bytes, const char* what) {
  if (bytes != 0) check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), what);
}

}  // namespace gpunvme::stream
