// The emulator's IOMMU: which host memory the controller may reach by DMA, and at which bus address.
// IOVAs come from the emulator's own range (from 0x4000'0000'0000, with unmapped guard gaps) and are
// deliberately never equal to the virtual address: code that hands the controller a pointer instead
// of a bus address gets Data Transfer Error, as it would under a real IOMMU.
//
// Readers (controller threads, on the hot path) translate with no lock against an immutable snapshot;
// writers (dma_map/dma_unmap, on host threads) copy, publish and reclaim through Qsbr, so when
// dma_unmap returns no controller thread can still touch the region.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "host/emulator/qsbr.h"

namespace gpunvme::emu {

class DmaTable {
 public:
  static constexpr uint64_t kIovaBase = 0x4000'0000'0000ull;
  static constexpr uint64_t kAlign = 2ull << 20;  // IOVA keeps the vaddr's offset within 2 MiB
  static constexpr uint64_t kGuard = 2ull << 20;  // unmapped gap after every mapping

  explicit DmaTable(Qsbr& qsbr);
  ~DmaTable();
  DmaTable(const DmaTable&) = delete;
  DmaTable& operator=(const DmaTable&) = delete;

  // Maps [vaddr, vaddr+len) and returns its IOVA. len and vaddr must be 4 KiB multiples (throws Error).
  uint64_t map(void* vaddr, uint64_t len);
  // Removes the mapping made for (vaddr, len) (len 0: the latest mapping starting at vaddr).
  // Returns false when there was none. `removed(iova, len)` runs under the write lock after the new
  // map is published and before waiting for the controller threads to leave their current pass.
  bool unmap(void* vaddr, uint64_t len, const std::function<void(uint64_t, uint64_t)>& removed = {});

  // Host pointer for [iova, iova+len) when every byte lies in one mapping, else nullptr.
  // Callers are I/O threads inside a Qsbr pass, or hold write_mutex() (the admin thread does).
  void* translate(uint64_t iova, uint64_t len) const {
    const Snapshot* s = current_.load(std::memory_order_acquire);
    const Region* r = s->find(iova);
    if (r == nullptr) return nullptr;
    const uint64_t off = iova - r->iova;
    if (len > r->len - off) return nullptr;
    return static_cast<char*>(r->host) + off;
  }
  // Same, for callers outside any controller thread (tests, diagnostics).
  void* translate_locked(uint64_t iova, uint64_t len) const {
    std::lock_guard<std::mutex> lock(write_mu_);
    return translate(iova, len);
  }
  size_t mappings() const;
  std::mutex& write_mutex() const { return write_mu_; }

 private:
  struct Region {
    uint64_t iova;
    uint64_t len;
    void* host;
  };
  struct Snapshot {
    std::vector<Region> regions;  // sorted by iova, non-overlapping
    const Region* find(uint64_t iova) const {
      size_t lo = 0, hi = regions.size();
      while (lo < hi) {  // last region with region.iova <= iova
        const size_t mid = (lo + hi) / 2;
        if (regions[mid].iova <= iova) lo = mid + 1;
        else hi = mid;
      }
      if (lo == 0) return nullptr;
      const Region& r = regions[lo - 1];
      return iova - r.iova < r.len ? &r : nullptr;
    }
  };
  void publish(Snapshot* next);

  Qsbr& qsbr_;
  mutable std::mutex write_mu_;
  std::atomic<const Snapshot*> current_;
  uint64_t next_iova_ = kIovaBase;
};

}  // namespace gpunvme::emu
