// LD_PRELOAD shim for the "numbers that cannot lie" test: it takes the place of the CUDA runtime's
// kernel-launch entry points, so that no gpunvme kernel runs, without touching gpunvme's code.
//   GPUNVME_SHIM_LAUNCH=fail (default)  every launch fails as an invalid launch configuration does
//                                       (cudaErrorInvalidConfiguration, reported by cudaGetLastError)
//   GPUNVME_SHIM_LAUNCH=skip            every launch "succeeds" and nothing runs (a kernel that never
//                                       ran, the case that prints impossible numbers)
// nvcc 13's launch stubs call __cudaLaunchKernel; the C API entry points are covered too. Their
// arguments are never read, so the shim declares them as unspecified.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

namespace {

constexpr int kInvalidConfiguration = 9;  // cudaErrorInvalidConfiguration
thread_local int pending = 0;             // the launch error cudaGetLastError owes, per thread like CUDA's

int launch() {
  const char* mode = std::getenv("GPUNVME_SHIM_LAUNCH");
  if (mode && std::strcmp(mode, "skip") == 0) return 0;
  pending = kInvalidConfiguration;
  return kInvalidConfiguration;
}

template <class Fn>
Fn real(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" {
int __cudaLaunchKernel(...) { return launch(); }
int __cudaLaunchKernel_ptsz(...) { return launch(); }
int cudaLaunchKernel(...) { return launch(); }
int cudaLaunchKernel_ptsz(...) { return launch(); }
int cudaLaunchKernelExC(...) { return launch(); }
int cudaLaunchKernelExC_ptsz(...) { return launch(); }
int cudaLaunchCooperativeKernel(...) { return launch(); }

int cudaGetLastError() {
  if (const int e = pending) {
    pending = 0;
    return e;
  }
  static const auto next = real<int (*)()>("cudaGetLastError");
  return next ? next() : 0;
}

int cudaPeekAtLastError() {
  if (pending) return pending;
  static const auto next = real<int (*)()>("cudaPeekAtLastError");
  return next ? next() : 0;
}
}
