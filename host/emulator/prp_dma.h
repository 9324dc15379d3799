// A command's data buffer, resolved through the emulator's IOMMU into host segments before any byte
// moves: a bad PRP or an unmapped byte fails the command with nothing touched.
#pragma once
#include <sys/uio.h>

#include <cstdint>
#include <vector>

#include "driver/prp.h"
#include "driver/status.h"
#include "host/emulator/dma_table.h"

namespace gpunvme::emu {

// Fills `out` with the host segments of [prp1/prp2, length) (adjacent segments merged).
// Returns the Generic status code: kSuccess, kPrpOffsetInvalid or kDataTransferError.
inline uint8_t resolve_prps(const DmaTable& dma, uint64_t prp1, uint64_t prp2, uint64_t length, uint64_t page,
                            std::vector<iovec>& out) {
  out.clear();
  const auto read_entry = [&](uint64_t bus, uint64_t* value) {
    const void* p = dma.translate(bus, 8);
    if (p == nullptr) return false;
    *value = *static_cast<const volatile uint64_t*>(p);
    return true;
  };
  const auto segment = [&](uint64_t bus, uint64_t len) {
    void* p = dma.translate(bus, len);
    if (p == nullptr) return false;
    if (!out.empty() && static_cast<char*>(out.back().iov_base) + out.back().iov_len == p) {
      out.back().iov_len += len;
    } else {
      out.push_back(iovec{p, size_t(len)});
    }
    return true;
  };
  switch (nvme::walk_prps(prp1, prp2, length, page, read_entry, segment)) {
    case nvme::PrpWalkResult::kOk: return nvme::sc::kSuccess;
    case nvme::PrpWalkResult::kOffsetInvalid: return nvme::sc::kPrpOffsetInvalid;
    case nvme::PrpWalkResult::kDmaFault:
    case nvme::PrpWalkResult::kSegmentFault: return nvme::sc::kDataTransferError;
  }
  return nvme::sc::kDataTransferError;
}

}  // namespace gpunvme::emu
