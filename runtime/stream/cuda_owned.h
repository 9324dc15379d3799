// Owners of CUDA resources: device memory, events and streams, each released with its owner (the
// handles are forward declared, so plain C++ headers can hold them; the deleters and makers are in
// cuda_owned.cu, CUDA builds only). A class that also has work in flight must synchronize in its
// destructor's body: members are released after it.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

struct CUevent_st;
struct CUstream_st;

namespace gpunvme::stream {

struct CudaFree {
  void operator()(void* p) const noexcept;
};
struct CudaEventDestroy {
  void operator()(CUevent_st* e) const noexcept;
};
struct CudaStreamDestroy {
  void operator()(CUstream_st* s) const noexcept;
};

using DeviceMemory = std::unique_ptr<void, CudaFree>;
using CudaEvent = std::unique_ptr<CUevent_st, CudaEventDestroy>;
using CudaStream = std::unique_ptr<CUstream_st, CudaStreamDestroy>;

// cudaMalloc of `bytes` (at least 1); throws Error(kIo) naming `what` on failure.
DeviceMemory device_malloc(size_t bytes, const char* what);
// An event without timing (ordering only); throws naming `what`.
CudaEvent make_event(const char* what);
// A non-blocking stream of the device's highest priority; throws naming `what`.
CudaStream make_priority_stream(const char* what);

// Device allocations that live as long as their owner, typed at the allocation: for tables built
// once (the pointers are handed to kernels inside a struct).
class DeviceArena {
 public:
  template <class T>
  T* alloc(size_t n, const char* what) {  // room for at least one T
    owned_.push_back(device_malloc(sizeof(T) * (n > 0 ? n : 1), what));
    return static_cast<T*>(owned_.back().get());
  }
  // A device copy of `v` (an allocation of one element when v is empty).
  template <class T>
  T* copy(const std::vector<T>& v, const char* what) {
    T* p = alloc<T>(v.size(), what);
    upload(p, v.data(), sizeof(T) * v.size(), what);
    return p;
  }

 private:
  static void upload(void* dst, const void* src, size_t bytes, const char* what);
  std::vector<DeviceMemory> owned_;
};

}  // namespace gpunvme::stream
