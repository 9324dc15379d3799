// How the host library reaches a controller: its BAR0 and its DMA address space.
// Implemented by the emulated controller (host/emulator/) and by VFIO (host/vfio/).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gpunvme::host {

// Bus addresses (IOVAs) of a mapped region, byte by byte. Under an IOMMU (VFIO type1, the
// emulator) the region is one contiguous IOVA range; in no-IOMMU mode it is a list of physically
// contiguous chunks (hugepages), looked up by offset.
class DmaTranslation {
 public:
  DmaTranslation() = default;
  static DmaTranslation contiguous(uint64_t base) {
    DmaTranslation t;
    t.base_ = base;
    return t;
  }
  static DmaTranslation chunked(std::vector<uint64_t> chunk_bus, unsigned chunk_shift) {
    DmaTranslation t;
    t.chunks_ = std::move(chunk_bus);
    t.chunk_shift_ = chunk_shift;
    return t;
  }
  bool is_contiguous() const { return chunks_.empty(); }
  uint64_t bus(uint64_t offset) const {
    if (chunks_.empty()) return base_ + offset;
    return chunks_[offset >> chunk_shift_] + (offset & ((uint64_t(1) << chunk_shift_) - 1));
  }
  // Bytes from `offset` that stay bus-contiguous.
  uint64_t contiguous_bytes_from(uint64_t offset, uint64_t len) const {
    if (chunks_.empty()) return len;
    const uint64_t chunk = uint64_t(1) << chunk_shift_;
    const uint64_t room = chunk - (offset & (chunk - 1));
    return room < len ? room : len;
  }

 private:
  uint64_t base_ = 0;
  std::vector<uint64_t> chunks_;
  unsigned chunk_shift_ = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // The device string this transport was opened from, e.g. "emu:/tmp/disk.img" or "vfio:0000:0b:00.0".
  virtual std::string name() const = 0;

  // BAR0 (registers and doorbells). Stable for the transport's lifetime; access through
  // driver/memory_order.h's mmio_* functions only.
  virtual volatile uint32_t* bar0() = 0;
  virtual uint64_t bar0_size() const = 0;

  // Makes [vaddr, vaddr + len) reachable by the controller's DMA and says where it lives on the bus.
  // vaddr and len are multiples of 4 KiB. Throws gpunvme::Error with a fix-naming message on failure.
  virtual DmaTranslation dma_map(void* vaddr, uint64_t len) = 0;
  // Undoes dma_map for the region starting at vaddr. Never throws.
  virtual void dma_unmap(void* vaddr, uint64_t len) noexcept = 0;

  // True when DMA addresses are physical (no IOMMU): memory must then be locked and hugepage backed.
  virtual bool physical_addressing() const { return false; }

  // BAR0 as the GPU sees it (doorbells written by kernels), registering it with CUDA on first use.
  // Returns nullptr with `why` filled where the platform cannot do it (no CUDA build, driver refuses).
  virtual volatile uint32_t* bar0_for_gpu(std::string* why) = 0;
};

}  // namespace gpunvme::host
