// I/O virtual addresses for VFIO type1 mappings: first fit over the IOMMU's valid ranges.
//
// Policy (documented in docs/vfio.md):
//  - Nothing is handed out below kDefaultBase (1 MiB): a zero or small garbage PRP then faults in the
//    IOMMU instead of landing on a buffer.
//  - Regions of 2 MiB or more start 2 MiB aligned so that the IOMMU can use large pages.
//  - Every region is followed by at least one unmapped guard page (kGuardBytes) in IOVA space, so a
//    controller that runs past the end of a buffer faults instead of touching the next buffer.
//  - Valid ranges come from VFIO_IOMMU_GET_INFO's IOVA range capability when the kernel offers it
//    (they exclude e.g. the x86 MSI window 0xfee00000..0xfeefffff); otherwise [1 MiB, 2^39) is used,
//    which every x86 IOMMU with a 39-bit or wider address width can translate.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace gpunvme::vfio {

struct IovaRange {
  uint64_t start;
  uint64_t last;  // inclusive, as VFIO reports it
};

class IovaAllocator {
 public:
  static constexpr uint64_t kDefaultBase = uint64_t(1) << 20;
  static constexpr uint64_t kDefaultEnd = uint64_t(1) << 39;
  static constexpr uint64_t kGuardBytes = 4096;
  static constexpr uint64_t kLargeAlign = uint64_t(2) << 20;

  // Valid ranges from the kernel; empty means "not reported", and the default range is used.
  explicit IovaAllocator(std::vector<IovaRange> valid = {});

  // An IOVA for `len` bytes (a multiple of 4 KiB), or nullopt when the space is exhausted.
  std::optional<uint64_t> allocate(uint64_t len);
  // Returns the range allocated at `iova` (len as passed to allocate).
  void release(uint64_t iova, uint64_t len);

  const std::vector<IovaRange>& ranges() const { return ranges_; }
  uint64_t bytes_in_use() const { return in_use_; }

 private:
  std::vector<IovaRange> ranges_;          // usable ranges, clipped to >= kDefaultBase
  std::map<uint64_t, uint64_t> used_;      // start -> length including the guard
  uint64_t in_use_ = 0;
};

}  // namespace gpunvme::vfio
