#include "host/vfio/pagemap.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "host/error.h"
#include "host/format.h"

namespace gpunvme::vfio {
namespace {

using host::hex;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

bool find_vma(std::string_view text, uint64_t addr, VmaInfo* out) {
  std::istringstream in{std::string(text)};
  std::string line;
  bool inside = false;
  VmaInfo cur;
  while (std::getline(in, line)) {
    // A VMA header: "start-end perms offset dev inode [path]"; fields follow as "Name: value".
    const auto dash = line.find('-');
    const auto colon = line.find(':');
    const bool header = dash != std::string::npos && (colon == std::string::npos || dash < colon) &&
                        dash > 0 && std::isxdigit(static_cast<unsigned char>(line[0]));
    if (header) {
      if (inside) break;  // fields of the VMA we wanted are over
      char* end = nullptr;
      const uint64_t s = std::strtoull(line.c_str(), &end, 16);
      const uint64_t e = std::strtoull(end + 1, nullptr, 16);
      if (addr >= s && addr < e) {
        inside = true;
        cur = VmaInfo{};
        cur.start = s;
        cur.end = e;
      }
      continue;
    }
    if (!inside) continue;
    if (line.rfind("KernelPageSize:", 0) == 0) {
      cur.kernel_page_bytes = std::strtoull(line.c_str() + 15, nullptr, 10) * 1024;
    } else if (line.rfind("VmFlags:", 0) == 0) {
      std::istringstream flags(line.substr(8));
      std::string f;
      while (flags >> f) {
        if (f == "lo") cur.locked = true;
        if (f == "ht") cur.hugetlb = true;
      }
    }
  }
  if (inside) *out = cur;
  return inside;
}

std::vector<uint64_t> translate_chunks(uint64_t vaddr, uint64_t len, uint64_t chunk_bytes, const PagemapReader& read) {
  if (chunk_bytes < 4096 || (chunk_bytes & (chunk_bytes - 1)) != 0 || (vaddr & (chunk_bytes - 1)) != 0 ||
      len == 0 || (len & 4095) != 0)
    throw Error(ErrorKind::kInvalidArgument,
                "no-IOMMU DMA mapping at " + hex(vaddr) + " (" + std::to_string(len) +
                    " bytes) must start on a hugepage boundary of " + std::to_string(chunk_bytes) + " bytes");
  std::vector<uint64_t> chunks;
  const uint64_t pages_per_chunk = chunk_bytes / 4096;
  for (uint64_t off = 0; off < len; off += chunk_bytes) {
    const uint64_t vpn = (vaddr + off) / 4096;
    const uint64_t last_in_chunk = std::min(len - off, chunk_bytes) / 4096 - 1;
    PagemapEntry first, last;
    if (!read(vpn, &first) || !read(vpn + last_in_chunk, &last))
      throw Error(ErrorKind::kIo, "cannot read /proc/self/pagemap for " + hex(vaddr + off) + ": " +
                                      std::strerror(errno));
    if (!first.present() || !last.present())
      throw Error(ErrorKind::kResource,
                  "no-IOMMU DMA: page at " + hex(vaddr + off) +
                      " is not resident; touch and mlock() the buffer before mapping it (DmaBuffer does this)");
    if (first.pfn() == 0)
      throw Error(ErrorKind::kPermission,
                  "no-IOMMU DMA: /proc/self/pagemap shows PFN 0 for " + hex(vaddr + off) +
                      ": physical addresses are hidden from processes without CAP_SYS_ADMIN. Run as root "
                      "(or grant CAP_SYS_ADMIN), or better, enable the IOMMU and use VFIO type1");
    if (last.pfn() != first.pfn() + last_in_chunk)
      throw Error(ErrorKind::kResource,
                  "no-IOMMU DMA: the " + std::to_string(chunk_bytes) + "-byte chunk at " + hex(vaddr + off) +
                      " is not physically contiguous (PFN " + hex(first.pfn()) + " .. " + hex(last.pfn()) +
                      "): the buffer must be backed by hugepages of that size");
    (void)pages_per_chunk;
    chunks.push_back(first.pfn() * 4096);
  }
  return chunks;
}

PagemapReader self_pagemap_reader(int fd) {
  return [fd](uint64_t vpn, PagemapEntry* out) {
    uint64_t v = 0;
    const ssize_t n = ::pread(fd, &v, sizeof(v), off_t(vpn * sizeof(v)));
    if (n != sizeof(v)) return false;
    out->raw = v;
    return true;
  };
}

std::vector<uint64_t> physical_chunks_of(void* vaddr, uint64_t len, unsigned* chunk_shift) {
  const uint64_t addr = reinterpret_cast<uint64_t>(vaddr);
  std::ifstream smaps("/proc/self/smaps");
  std::stringstream text;
  text << smaps.rdbuf();
  VmaInfo vma;
  if (!find_vma(text.str(), addr, &vma))
    throw Error(ErrorKind::kInvalidArgument, "no-IOMMU DMA: " + hex(addr) + " is not mapped in this process");
  if (!vma.hugetlb || vma.kernel_page_bytes < (uint64_t(2) << 20))
    throw Error(ErrorKind::kResource,
                "no-IOMMU DMA refused: the buffer at " + hex(addr) + " is backed by " +
                    std::to_string(vma.kernel_page_bytes / 1024) +
                    " KiB pages, not hugetlb pages (locked or not): without an IOMMU only hugetlb pages are safe, "
                    "ordinary and transparent huge pages can be swapped, compacted or migrated under the device. "
                    "Reserve some with `scripts/setup_vfio.sh hugepages N` and allocate with HugePages::kRequire");
  // hugetlb pages are never swapped and Linux does not even set VM_LOCKED on them (mlock skips
  // hugetlb VMAs), so "locked" means here: hugetlb backed and resident, checked per chunk below.
  if (addr + len > vma.end)
    throw Error(ErrorKind::kInvalidArgument, "no-IOMMU DMA: region at " + hex(addr) + " spans several mappings");
  Fd pm;
  pm.fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pm.fd < 0)
    throw Error(ErrorKind::kPermission, std::string("no-IOMMU DMA: cannot open /proc/self/pagemap: ") +
                                            std::strerror(errno));
  unsigned shift = 0;
  while ((uint64_t(1) << shift) < vma.kernel_page_bytes) ++shift;
  *chunk_shift = shift;
  return translate_chunks(addr, len, vma.kernel_page_bytes, self_pagemap_reader(pm.fd));
}

}  // namespace gpunvme::vfio
