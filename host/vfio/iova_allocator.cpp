#include "host/vfio/iova_allocator.h"

#include <algorithm>

namespace gpunvme::vfio {

IovaAllocator::IovaAllocator(std::vector<IovaRange> valid) {
  if (valid.empty()) valid.push_back({kDefaultBase, kDefaultEnd - 1});
  std::sort(valid.begin(), valid.end(), [](const IovaRange& a, const IovaRange& b) { return a.start < b.start; });
  for (IovaRange r : valid) {
    if (r.last < kDefaultBase) continue;
    r.start = std::max(r.start, kDefaultBase);
    // Whole pages only.
    r.start = (r.start + 4095) & ~uint64_t(4095);
    if (r.last < r.start + 4095) continue;
    ranges_.push_back(r);
  }
}

std::optional<uint64_t> IovaAllocator::allocate(uint64_t len) {
  if (len == 0 || (len & 4095) != 0) return std::nullopt;
  const uint64_t align = len >= kLargeAlign ? kLargeAlign : 4096;
  const uint64_t need = len + kGuardBytes;
  for (const IovaRange& r : ranges_) {
    uint64_t cand = (r.start + align - 1) & ~(align - 1);
    // Walk the used regions in address order, trying the gap before each.
    auto it = used_.lower_bound(0);
    for (; it != used_.end(); ++it) {
      const uint64_t ustart = it->first;
      const uint64_t uend = it->first + it->second;  // exclusive
      if (uend <= cand) continue;
      if (ustart >= cand + need) break;  // fits before this one
      cand = (uend + align - 1) & ~(align - 1);
    }
    if (cand < r.start || cand + need < cand) continue;
    // The guard page may fall outside the range (it is never mapped), the region itself may not.
    if (cand + len - 1 > r.last) continue;
    used_.emplace(cand, need);
    in_use_ += len;
    return cand;
  }
  return std::nullopt;
}

void IovaAllocator::release(uint64_t iova, uint64_t len) {
  auto it = used_.find(iova);
  if (it == used_.end()) return;
  used_.erase(it);
  in_use_ -= len;
}

}  // namespace gpunvme::vfio
