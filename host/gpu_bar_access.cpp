#include "host/gpu_bar_access.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#if GPUNVME_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gpunvme::host {
namespace {

bool contains(const std::string& s, const char* word) { return s.find(word) != std::string::npos; }

// GeForce and TITAN are NVIDIA's consumer lines; everything else CUDA reports (Tesla/data-center,
// Quadro, RTX A-series, RTX PRO) belongs to the GPUDirect RDMA class.
bool consumer_gpu(const std::string& name) { return contains(name, "GeForce") || contains(name, "TITAN"); }

}  // namespace

const char* verdict_name(BarMapVerdict v) {
  switch (v) {
    case BarMapVerdict::kExpected: return "expected";
    case BarMapVerdict::kUnlikely: return "unlikely";
    case BarMapVerdict::kDoNotTry: return "do-not-try";
    case BarMapVerdict::kNoGpu: return "no-gpu";
  }
  return "?";
}

BarMapAssessment assess_bar_mapping(const GpuFacts& gpu) {
  if (!gpu.present) return {BarMapVerdict::kNoGpu, "no GPU: " + gpu.absent_why};
  if (gpu.integrated)
    return {BarMapVerdict::kUnlikely, gpu.name + " is an integrated GPU; CUDA documents peer MMIO registration "
                                                 "for discrete PCIe GPUs on Linux"};
  if (gpu.host_register_supported == 0)
    return {BarMapVerdict::kUnlikely, gpu.name + " reports cudaDevAttrHostRegisterSupported = 0: the driver "
                                                 "registers no host ranges at all"};
  if (consumer_gpu(gpu.name)) {
    if (gpu.cc_major >= 12)
      return {BarMapVerdict::kDoNotTry,
              gpu.name + " is a GeForce Blackwell card (compute capability " + std::to_string(gpu.cc_major) + "." +
                  std::to_string(gpu.cc_minor) +
                  "): registering a PCIe BAR with cudaHostRegisterIoMemory is reported to crash the GPU firmware "
                  "(reported by users of GPU-initiated NVMe projects; not reproduced by gpunvme). gpunvme does not "
                  "try; doorbells go through the CPU. Set GPUNVME_GPU_BAR_MAP=force to try at your own risk"};
    return {BarMapVerdict::kUnlikely,
            gpu.name + " is a GeForce card: NVIDIA supports GPUDirect RDMA (peer MMIO) on data-center and "
                       "professional GPUs only, and GeForce users of GPU-initiated NVMe projects report the "
                       "registration failing; `auto` tries once and falls back to CPU doorbells"};
  }
  return {BarMapVerdict::kExpected,
          gpu.name + " is a data-center/professional GPU (GPUDirect RDMA class): registering the NVMe BAR is "
                     "expected to work with the IOMMU on; only a real drive proves it (run with --doorbell auto)"};
}

GpuFacts query_gpu(int index) {
  GpuFacts f;
  f.index = index;
#if GPUNVME_HAVE_CUDA
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= index) {
    f.absent_why = e != cudaSuccess ? std::string("the CUDA runtime reports: ") + cudaGetErrorString(e)
                                    : "no CUDA GPU " + std::to_string(index) + " (" + std::to_string(count) + " found)";
    cudaGetLastError();
    return f;
  }
  cudaDeviceProp p{};
  if ((e = cudaGetDeviceProperties(&p, index)) != cudaSuccess) {
    f.absent_why = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(e);
    cudaGetLastError();
    return f;
  }
  f.present = true;
  f.name = p.name;
  f.cc_major = p.major;
  f.cc_minor = p.minor;
  f.integrated = p.integrated != 0;
  f.memory_bytes = p.totalGlobalMem;
  cudaDriverGetVersion(&f.cuda_driver_version);
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrHostRegisterSupported, index) == cudaSuccess) f.host_register_supported = v;
  char bdf[32] = {};
  if (cudaDeviceGetPCIBusId(bdf, sizeof bdf, index) == cudaSuccess) {
    f.pci_bdf = bdf;
    std::transform(f.pci_bdf.begin(), f.pci_bdf.end(), f.pci_bdf.begin(),
                   [](char c) { return char(std::tolower(uint8_t(c))); });
    // CUDA prints an 8-digit domain ("00000000:65:00.0"); sysfs uses four.
    if (f.pci_bdf.size() == 16) f.pci_bdf = f.pci_bdf.substr(4);
  }
  cudaGetLastError();
#else
  f.absent_why = "gpunvme was built without CUDA (configure with -Dcuda=enabled on a machine with nvcc)";
#endif
  return f;
}

volatile uint32_t* register_io_memory_for_gpu(void* host, uint64_t bytes, const std::string& what, std::string* why) {
  auto fail = [&](const std::string& text) -> volatile uint32_t* {
    if (why) *why = text + ". Use doorbell=cpu (doorbell=auto does so by itself): the GPU then writes doorbells "
                           "into a host mailbox that a CPU thread forwards";
    return nullptr;
  };
#if GPUNVME_HAVE_CUDA
  int dev = 0;
  cudaGetDevice(&dev);
  const GpuFacts gpu = query_gpu(dev);
  const BarMapAssessment a = assess_bar_mapping(gpu);
  if (a.verdict == BarMapVerdict::kNoGpu) return fail("cannot map " + what + " into the GPU: " + a.reason);
  const char* force = std::getenv(kForceBarMapEnv);
  if (a.verdict == BarMapVerdict::kDoNotTry && !(force && std::strcmp(force, "force") == 0))
    return fail("not mapping " + what + " into the GPU: " + a.reason);
  if (host == nullptr || bytes == 0 || (reinterpret_cast<uintptr_t>(host) & 4095) != 0 || (bytes & 4095) != 0)
    return fail("cannot map " + what + " into the GPU: the range must be a non-empty, 4 KiB aligned mapping");
  cudaError_t e = cudaHostRegister(host, bytes, cudaHostRegisterIoMemory | cudaHostRegisterMapped);
  if (e != cudaSuccess) {
    cudaGetLastError();
    std::string hint;
    if (e == cudaErrorNotPermitted) hint = " (CUDA needs root for I/O memory: run as root)";
    else if (e == cudaErrorNotSupported) hint = " (the kernel or driver does not support peer MMIO registration)";
    return fail("cudaHostRegister(" + what + ", IoMemory|Mapped) failed: " + cudaGetErrorString(e) + hint + ". " +
                a.reason);
  }
  void* dptr = nullptr;
  e = cudaHostGetDevicePointer(&dptr, host, 0);
  if (e != cudaSuccess || dptr == nullptr) {
    cudaGetLastError();
    cudaHostUnregister(host);
    return fail("cudaHostGetDevicePointer(" + what + ") failed: " + cudaGetErrorString(e));
  }
  return static_cast<volatile uint32_t*>(dptr);
#else
  (void)host;
  (void)bytes;
  return fail("this build has no CUDA (configure with -Dcuda=enabled): the GPU cannot map " + what);
#endif
}

void unregister_io_memory_for_gpu(void* host) noexcept {
#if GPUNVME_HAVE_CUDA
  if (host) cudaHostUnregister(host);
  cudaGetLastError();
#else
  (void)host;
#endif
}

}  // namespace gpunvme::host
