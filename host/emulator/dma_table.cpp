#include "host/emulator/dma_table.h"

#include <algorithm>
#include <cstdio>

#include "host/error.h"

namespace gpunvme::emu {

DmaTable::DmaTable(Qsbr& qsbr) : qsbr_(qsbr), current_(new Snapshot{}) {}

DmaTable::~DmaTable() { delete current_.load(); }

uint64_t DmaTable::map(void* vaddr, uint64_t len) {
  const auto va = reinterpret_cast<uintptr_t>(vaddr);
  if (vaddr == nullptr || len == 0 || (va & 4095) != 0 || (len & 4095) != 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "emu dma_map(%p, %llu): address and length must be non-zero multiples of 4 KiB",
                  vaddr, static_cast<unsigned long long>(len));
    throw Error(ErrorKind::kInvalidArgument, buf);
  }
  std::lock_guard<std::mutex> lock(write_mu_);
  // Same offset within 2 MiB as the virtual address, so large pages stay large on the bus.
  uint64_t iova = (next_iova_ + kAlign - 1) & ~(kAlign - 1);
  iova += va & (kAlign - 1);
  next_iova_ = iova + len + kGuard;
  auto* next = new Snapshot(*current_.load(std::memory_order_relaxed));
  const Region r{iova, len, vaddr};
  next->regions.insert(std::upper_bound(next->regions.begin(), next->regions.end(), r,
                                        [](const Region& a, const Region& b) { return a.iova < b.iova; }),
                       r);
  publish(next);
  return iova;
}

bool DmaTable::unmap(void* vaddr, uint64_t len, const std::function<void(uint64_t, uint64_t)>& removed) {
  std::lock_guard<std::mutex> lock(write_mu_);
  const Snapshot* cur = current_.load(std::memory_order_relaxed);
  // The latest matching mapping (largest IOVA) wins when the same memory was mapped twice.
  int found = -1;
  for (size_t i = 0; i < cur->regions.size(); ++i) {
    const Region& r = cur->regions[i];
    if (r.host == vaddr && (len == 0 || r.len == len)) found = int(i);
  }
  if (found < 0) return false;
  const Region gone = cur->regions[found];
  auto* next = new Snapshot(*cur);
  next->regions.erase(next->regions.begin() + found);
  const Snapshot* old = current_.exchange(next, std::memory_order_seq_cst);
  if (removed) removed(gone.iova, gone.len);
  qsbr_.synchronize();
  delete old;
  return true;
}

void DmaTable::publish(Snapshot* next) {
  const Snapshot* old = current_.exchange(next, std::memory_order_seq_cst);
  qsbr_.synchronize();
  delete old;
}

size_t DmaTable::mappings() const {
  std::lock_guard<std::mutex> lock(write_mu_);
  return current_.load()->regions.size();
}

}  // namespace gpunvme::emu
