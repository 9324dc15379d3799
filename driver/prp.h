// Physical Region Page rules (NVMe Base 2.0 section 4.1.1 and figure 87), for both sides:
// the host builds PRP1/PRP2 and PRP lists; the controller (our emulator) walks and validates them.
//
//  - PRP1 points at the first byte; it may carry a page offset, which must be dword aligned.
//  - If the transfer ends inside PRP1's page, PRP2 is unused.
//  - If it ends inside the next page, PRP2 is that page's address (offset 0).
//  - Otherwise PRP2 points to a PRP list: 8-byte entries, each a page address with offset 0.
//    A list occupies memory up to the end of a memory page; if more entries are needed the last
//    entry of that page is not data but a pointer to the next list page ("chaining").
//  - The memory page size is CC.MPS, not the LBA size or the OS page size.
#pragma once
#include <cstdint>

#include "driver/compiler.h"

namespace gpunvme::nvme {

// Pages a transfer of `length` bytes starting `offset` bytes into its first page touches.
GPUNVME_HD constexpr uint64_t prp_pages_spanned(uint64_t offset, uint64_t length, uint64_t page) {
  return length == 0 ? 0 : (offset + length + page - 1) / page;
}

// PRP list entries (data pointers) a transfer needs beyond PRP1: zero when PRP2 is unused or direct.
GPUNVME_HD constexpr uint64_t prp_list_entries(uint64_t offset, uint64_t length, uint64_t page) {
  const uint64_t pages = prp_pages_spanned(offset, length, page);
  return pages > 2 ? pages - 1 : 0;
}

// List pages needed for `entries` data pointers when every list page starts page aligned:
// each page but the last gives one slot to the chain pointer.
GPUNVME_HD constexpr uint64_t prp_list_pages(uint64_t entries, uint64_t page) {
  const uint64_t per_page = page / 8;
  if (entries == 0) return 0;
  if (entries <= per_page) return 1;
  return (entries - 1 + (per_page - 1) - 1) / (per_page - 1);
}

// Largest data transfer per command (section 5.17.2.1, MDTS): 2^MDTS units of CAP.MPSMIN; 0 = no limit.
GPUNVME_HD constexpr uint64_t max_transfer_bytes(uint8_t mdts, uint64_t min_page_bytes) {
  return mdts == 0 ? 0 : (min_page_bytes << mdts);
}

// Blocks per command after MDTS and the 16-bit NLB field.
GPUNVME_HD constexpr uint32_t max_blocks_per_command(uint8_t mdts, uint64_t min_page_bytes, uint64_t lba_bytes) {
  const uint64_t mt = max_transfer_bytes(mdts, min_page_bytes);
  uint64_t blocks = mt == 0 ? 65536 : mt / lba_bytes;
  if (blocks > 65536) blocks = 65536;
  return blocks == 0 ? 1 : uint32_t(blocks);
}

struct PrpPair {
  uint64_t prp1 = 0;
  uint64_t prp2 = 0;
};

struct PrpListMemory {
  uint64_t* host = nullptr;  // CPU (or GPU) view of the list page
  uint64_t bus = 0;          // its bus address (IOVA), page aligned
};

// Builds PRP1/PRP2 for a transfer of `length` bytes whose byte i lives at bus address
// page_bus(i / page) + i % page ... with the first page starting at `offset`.
//   page_bus(k):  bus address (page aligned) of the k-th page the transfer touches.
//   list_page(j): the j-th page of list memory; called only when a list is needed.
// Returns false when the request breaks a rule (offset not dword aligned, empty transfer).
template <class PageBus, class ListPage>
GPUNVME_HD bool build_prps(uint64_t offset, uint64_t length, uint64_t page, PageBus page_bus, ListPage list_page,
                           PrpPair* out) {
  if (length == 0 || (offset & 3) != 0 || offset >= page) return false;
  const uint64_t pages = prp_pages_spanned(offset, length, page);
  out->prp1 = page_bus(0) + offset;
  out->prp2 = 0;
  if (pages == 1) return true;
  if (pages == 2) {
    out->prp2 = page_bus(1);
    return true;
  }
  const uint64_t per_page = page / 8;
  uint64_t remaining = pages - 1;  // data pages after the first
  uint64_t next_data = 1;
  uint32_t j = 0;
  PrpListMemory cur = list_page(j++);
  out->prp2 = cur.bus;
  for (;;) {
    if (remaining <= per_page) {
      for (uint64_t i = 0; i < remaining; ++i) cur.host[i] = page_bus(next_data++);
      return true;
    }
    for (uint64_t i = 0; i + 1 < per_page; ++i) cur.host[i] = page_bus(next_data++);
    remaining -= per_page - 1;
    PrpListMemory nxt = list_page(j++);
    cur.host[per_page - 1] = nxt.bus;  // chain pointer
    cur = nxt;
  }
}

// Controller side: walks a command's PRPs and yields (bus address, length) segments in order.
//   read_entry(bus, &value) reads one 8-byte list entry by DMA; returns false if the address is
//   not mapped for DMA (the caller turns that into Data Transfer Error).
//   segment(bus, len) receives each data segment; returns false to stop with Data Transfer Error.
enum class PrpWalkResult : uint8_t { kOk, kOffsetInvalid, kDmaFault, kSegmentFault };

template <class ReadEntry, class Segment>
GPUNVME_HD PrpWalkResult walk_prps(uint64_t prp1, uint64_t prp2, uint64_t length, uint64_t page,
                                   ReadEntry read_entry, Segment segment) {
  if ((prp1 & 3) != 0) return PrpWalkResult::kOffsetInvalid;
  const uint64_t offset = prp1 & (page - 1);
  uint64_t first = page - offset;
  if (first > length) first = length;
  if (!segment(prp1, first)) return PrpWalkResult::kSegmentFault;
  uint64_t left = length - first;
  if (left == 0) return PrpWalkResult::kOk;
  if (left <= page) {
    // Two pages: PRP2 is a data pointer and must be page aligned.
    if ((prp2 & (page - 1)) != 0) return PrpWalkResult::kOffsetInvalid;
    return segment(prp2, left) ? PrpWalkResult::kOk : PrpWalkResult::kSegmentFault;
  }
  // A list: the pointer must be qword aligned; it may start mid-page.
  if ((prp2 & 7) != 0) return PrpWalkResult::kOffsetInvalid;
  uint64_t entry_addr = prp2;
  while (left > 0) {
    const bool last_in_page = ((entry_addr + 8) & (page - 1)) == 0;
    uint64_t value = 0;
    if (!read_entry(entry_addr, &value)) return PrpWalkResult::kDmaFault;
    if (last_in_page && left > page) {
      // More data than this entry can describe: it chains to the next list page.
      if ((value & 7) != 0) return PrpWalkResult::kOffsetInvalid;
      entry_addr = value;
      continue;
    }
    if ((value & (page - 1)) != 0) return PrpWalkResult::kOffsetInvalid;
    const uint64_t n = left < page ? left : page;
    if (!segment(value, n)) return PrpWalkResult::kSegmentFault;
    left -= n;
    entry_addr += 8;
  }
  return PrpWalkResult::kOk;
}

}  // namespace gpunvme::nvme
