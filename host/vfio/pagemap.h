// Bus addresses for no-IOMMU VFIO: physical addresses from /proc/self/pagemap.
//
// Without an IOMMU the controller reaches memory by physical address, so a buffer is safe to hand
// over only if its pages can neither move nor be swapped out while the controller holds them:
// it must be hugetlb backed and resident. hugetlb pages are never swapped, and Linux keeps them out of
// mlock accounting (VM_LOCKED is never set on a hugetlb VMA), so they count as locked; ordinary pages,
// even mlocked ones, may still be compacted or migrated, and are refused. The process must also be
// allowed to see PFNs (since Linux 4.2 pagemap reads PFN 0 without CAP_SYS_ADMIN).
// Every check below refuses with a message that names the fix.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace gpunvme::vfio {

// One /proc/self/pagemap entry (Documentation/admin-guide/mm/pagemap.rst).
struct PagemapEntry {
  uint64_t raw = 0;
  bool present() const { return (raw >> 63) & 1; }
  bool swapped() const { return (raw >> 62) & 1; }
  uint64_t pfn() const { return raw & ((uint64_t(1) << 55) - 1); }
};

// The mapping that holds an address, as /proc/self/smaps describes it.
struct VmaInfo {
  uint64_t start = 0;
  uint64_t end = 0;                  // exclusive
  uint64_t kernel_page_bytes = 0;    // KernelPageSize
  bool locked = false;               // VmFlags "lo" (never set on hugetlb VMAs)
  bool hugetlb = false;              // VmFlags "ht"
};

// Finds the VMA containing `addr` in smaps text; false when none does.
bool find_vma(std::string_view smaps_text, uint64_t addr, VmaInfo* out);

// Reads pagemap entries for 4 KiB virtual page numbers. Returns false on a read error.
using PagemapReader = std::function<bool(uint64_t vpn, PagemapEntry* out)>;

// Bus address of every hugepage (chunk) of [vaddr, vaddr + len): one entry per `chunk_bytes`.
// Checks that the first and last 4 KiB page of each chunk are present, physically contiguous, and
// that the PFN is non-zero. Throws gpunvme::Error naming the fix.
std::vector<uint64_t> translate_chunks(uint64_t vaddr, uint64_t len, uint64_t chunk_bytes, const PagemapReader& read);

// The full no-IOMMU check for a live region of this process: hugetlb backed, resident, PFNs visible.
// Returns the chunk bus addresses and sets *chunk_shift. Throws gpunvme::Error naming the fix.
std::vector<uint64_t> physical_chunks_of(void* vaddr, uint64_t len, unsigned* chunk_shift);

// A PagemapReader over /proc/self/pagemap (opened per call to translate).
PagemapReader self_pagemap_reader(int fd);

}  // namespace gpunvme::vfio
