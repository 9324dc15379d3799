// DMA memory: pinned, page aligned, hugepage backed where possible, NUMA local where the machine
// has NUMA, mapped for the controller through the transport, and optionally mapped into the GPU.
#pragma once
#include <cstddef>
#include <cstdint>

#include "host/transport.h"

namespace gpunvme::host {

enum class HugePages { kAuto, kRequire, kNever };

struct DmaOptions {
  HugePages hugepages = HugePages::kAuto;
  int numa_node = -1;       // -1: the node of the calling thread's CPU (when libnuma is present)
  bool gpu_mapped = false;  // register with CUDA (cudaHostRegisterMapped) so kernels can reach it
};

class DmaBuffer {
 public:
  DmaBuffer() = default;
  DmaBuffer(Transport& transport, uint64_t bytes, const DmaOptions& options = {});
  ~DmaBuffer();
  DmaBuffer(DmaBuffer&& other) noexcept;
  DmaBuffer& operator=(DmaBuffer&& other) noexcept;
  DmaBuffer(const DmaBuffer&) = delete;
  DmaBuffer& operator=(const DmaBuffer&) = delete;

  void* host() const { return host_; }
  template <class T>
  T* as() const { return static_cast<T*>(host_); }
  uint64_t size() const { return size_; }
  uint64_t mapped_size() const { return mapped_size_; }  // size rounded up to the pages it maps
  uint64_t bus(uint64_t offset = 0) const { return translation_.bus(offset); }
  const DmaTranslation& translation() const { return translation_; }
  // GPU view (cudaHostGetDevicePointer), or nullptr when not GPU mapped.
  void* device() const { return device_; }
  explicit operator bool() const { return host_ != nullptr; }

 private:
  void release() noexcept;
  Transport* transport_ = nullptr;
  void* host_ = nullptr;
  uint64_t size_ = 0;
  uint64_t mapped_size_ = 0;
  DmaTranslation translation_;
  void* device_ = nullptr;
  bool cuda_registered_ = false;
};

// A DmaBuffer made reachable by a second controller's DMA too (a striped set: one streaming slot
// filled by several controllers, each through its own IOMMU mapping). Unmapped when destroyed; the
// buffer must outlive it.
class DmaMapping {
 public:
  DmaMapping() = default;
  DmaMapping(Transport& transport, const DmaBuffer& buffer);
  ~DmaMapping();
  DmaMapping(DmaMapping&& other) noexcept;
  DmaMapping& operator=(DmaMapping&& other) noexcept;
  DmaMapping(const DmaMapping&) = delete;
  DmaMapping& operator=(const DmaMapping&) = delete;
  const DmaTranslation& translation() const { return translation_; }

 private:
  void release() noexcept;
  Transport* transport_ = nullptr;
  void* host_ = nullptr;
  uint64_t len_ = 0;
  DmaTranslation translation_;
};

}  // namespace gpunvme::host
