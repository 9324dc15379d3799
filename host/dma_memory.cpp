#include "host/dma_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "host/error.h"

#if GPUNVME_HAVE_NUMA
#include <numa.h>
#include <sched.h>
#endif
#if GPUNVME_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gpunvme::host {
namespace {

constexpr uint64_t kSmallPage = 4096;
constexpr uint64_t kHugePage = 2ull << 20;

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

void* map_anonymous(uint64_t bytes, bool huge) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE;
  if (huge) flags |= MAP_HUGETLB;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void bind_numa(void* p, uint64_t bytes, int node) {
#if GPUNVME_HAVE_NUMA
  if (numa_available() < 0 || numa_num_configured_nodes() < 2) return;
  if (node < 0) {
    const int cpu = sched_getcpu();
    node = cpu >= 0 ? numa_node_of_cpu(cpu) : -1;
  }
  if (node >= 0) numa_tonode_memory(p, bytes, node);
#else
  (void)p;
  (void)bytes;
  (void)node;
#endif
}

}  // namespace

DmaBuffer::DmaBuffer(Transport& transport, uint64_t bytes, const DmaOptions& options) : transport_(&transport) {
  if (bytes == 0) throw Error(ErrorKind::kInvalidArgument, "DMA buffer of 0 bytes requested");
  size_ = bytes;
  const bool want_huge = options.hugepages == HugePages::kRequire ||
                         (options.hugepages == HugePages::kAuto && bytes >= kHugePage / 2);
  if (want_huge) {
    mapped_size_ = round_up(bytes, kHugePage);
    host_ = map_anonymous(mapped_size_, true);
    if (!host_ && options.hugepages == HugePages::kRequire)
      throw Error(ErrorKind::kResource,
                  "no free 2 MiB hugepages for a " + std::to_string(bytes) +
                      "-byte DMA buffer: reserve some with `scripts/setup_vfio.sh hugepages N` "
                      "(or echo N > /proc/sys/vm/nr_hugepages)");
  }
  if (!host_) {
    mapped_size_ = round_up(bytes, kSmallPage);
    host_ = map_anonymous(mapped_size_, false);
    if (!host_)
      throw Error(ErrorKind::kResource,
                  "cannot allocate " + std::to_string(mapped_size_) + " bytes of DMA memory: " + std::strerror(errno));
  }
  bind_numa(host_, mapped_size_, options.numa_node);
  // Pinned: the controller may DMA at any time, so the pages must never move or be swapped.
  if (mlock(host_, mapped_size_) != 0 && transport.physical_addressing()) {
    const int err = errno;
    munmap(host_, mapped_size_);
    host_ = nullptr;
    throw Error(ErrorKind::kResource, std::string("cannot lock DMA memory (") + std::strerror(err) +
                                          "): without an IOMMU the pages must be locked; raise `ulimit -l` or run as root");
  }
  try {
    translation_ = transport.dma_map(host_, mapped_size_);
  } catch (...) {
    munmap(host_, mapped_size_);
    host_ = nullptr;
    throw;
  }
  if (options.gpu_mapped) {
#if GPUNVME_HAVE_CUDA
    cudaError_t e = cudaHostRegister(host_, mapped_size_, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e == cudaSuccess) e = cudaHostGetDevicePointer(&device_, host_, 0);
    if (e != cudaSuccess) {
      const std::string msg = std::string("cannot map DMA memory into the GPU: ") + cudaGetErrorString(e);
      release();
      throw Error(ErrorKind::kUnsupported, msg);
    }
    cuda_registered_ = true;
#else
    release();
    throw Error(ErrorKind::kUnsupported, "GPU-mapped DMA memory needs a CUDA build of gpunvme");
#endif
  }
}

void DmaBuffer::release() noexcept {
  if (!host_) return;
#if GPUNVME_HAVE_CUDA
  if (cuda_registered_) cudaHostUnregister(host_);
#endif
  if (transport_) transport_->dma_unmap(host_, mapped_size_);
  munmap(host_, mapped_size_);
  host_ = nullptr;
  device_ = nullptr;
  cuda_registered_ = false;
}

DmaBuffer::~DmaBuffer() { release(); }

DmaBuffer::DmaBuffer(DmaBuffer&& o) noexcept { *this = std::move(o); }

DmaBuffer& DmaBuffer::operator=(DmaBuffer&& o) noexcept {
  if (this != &o) {
    release();
    transport_ = std::exchange(o.transport_, nullptr);
    host_ = std::exchange(o.host_, nullptr);
    size_ = std::exchange(o.size_, 0);
    mapped_size_ = std::exchange(o.mapped_size_, 0);
    translation_ = std::move(o.translation_);
    device_ = std::exchange(o.device_, nullptr);
    cuda_registered_ = std::exchange(o.cuda_registered_, false);
  }
  return *this;
}

DmaMapping::DmaMapping(Transport& transport, const DmaBuffer& buffer)
    : transport_(&transport), host_(buffer.host()), len_(buffer.mapped_size()) {
  translation_ = transport.dma_map(host_, len_);
}

DmaMapping::~DmaMapping() { release(); }

void DmaMapping::release() noexcept {
  if (transport_ && host_) transport_->dma_unmap(host_, len_);
  transport_ = nullptr;
  host_ = nullptr;
}

DmaMapping::DmaMapping(DmaMapping&& o) noexcept
    : transport_(std::exchange(o.transport_, nullptr)), host_(std::exchange(o.host_, nullptr)), len_(o.len_),
      translation_(o.translation_) {}

DmaMapping& DmaMapping::operator=(DmaMapping&& o) noexcept {
  if (this != &o) {
    release();
    transport_ = std::exchange(o.transport_, nullptr);
    host_ = std::exchange(o.host_, nullptr);
    len_ = o.len_;
    translation_ = o.translation_;
  }
  return *this;
}

}  // namespace gpunvme::host
