// VFIO pieces that run without a VFIO device: BDF parsing, sysfs diagnostics on a fake tree, the IOVA
// allocator, the no-IOMMU pagemap translation and its refusals, and the transport's refusals.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "host/error.h"
#include "host/vfio/iova_allocator.h"
#include "host/vfio/pagemap.h"
#include "host/vfio/sysfs_pci.h"
#include "host/vfio/vfio_transport.h"
#include "tests/test_files.h"

using namespace gpunvme;
using namespace gpunvme::vfio;
using Catch::Matchers::ContainsSubstring;
namespace fs = std::filesystem;

namespace {

// A fake /sys with PCI devices, drivers and IOMMU groups, removed on destruction.
struct FakeSysfs {
  test_files::TempDir dir{"gpunvme-sysfs"};
  fs::path root = dir.path;
  FakeSysfs() { fs::create_directories(root / "bus/pci/devices"); }
  void add(const std::string& bdf, const std::string& driver, int group, const std::string& cls = "0x010802") {
    const fs::path dev = root / "devices/pci0000:00" / bdf;
    fs::create_directories(dev);
    std::ofstream(dev / "class") << cls << "\n";
    fs::create_directory_symlink(dev, root / "bus/pci/devices" / bdf);
    if (!driver.empty()) {
      const fs::path drv = root / "bus/pci/drivers" / driver;
      fs::create_directories(drv);
      fs::create_directory_symlink(drv, dev / "driver");
    }
    if (group >= 0) {
      const fs::path g = root / "kernel/iommu_groups" / std::to_string(group);
      fs::create_directories(g / "devices");
      fs::create_directory_symlink(g, dev / "iommu_group");
      fs::create_directory_symlink(dev, g / "devices" / bdf);
    }
  }
  VfioOptions options() const {
    VfioOptions o;
    o.sysfs_root = root.string();
    o.dev_vfio = (root / "dev-vfio").string();  // never exists
    return o;
  }
};

std::string open_error(const std::string& device, const VfioOptions& o) {
  try {
    VfioTransport t(device, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "(opened)";
}

}  // namespace

TEST_CASE("BDFs are normalized and malformed ones refused", "[vfio][unit]") {
  CHECK(normalize_bdf("0000:0b:00.0") == "0000:0b:00.0");
  CHECK(normalize_bdf("0B:00.0") == "0000:0b:00.0");
  CHECK(normalize_bdf("10000:0b:00.0") == std::nullopt);
  CHECK(normalize_bdf("0000:0b:00.8") == std::nullopt);
  CHECK(normalize_bdf("0000:0b:0.0") == std::nullopt);
  CHECK(normalize_bdf("zz:00.0") == std::nullopt);
  CHECK(normalize_bdf("") == std::nullopt);
  CHECK(is_vfio_device_string("vfio:0000:0b:00.0"));
  CHECK_FALSE(is_vfio_device_string("emu:ram"));
  CHECK_THAT(open_error("vfio:0b:00", {}), ContainsSubstring("expected vfio:DOMAIN:BUS:DEV.FN"));
}

TEST_CASE("opening names the fix: missing device, wrong driver, no IOMMU, no /dev/vfio", "[vfio][unit]") {
  FakeSysfs sys;
  sys.add("0000:0b:00.0", "nvme", 12);
  sys.add("0000:0c:00.0", "", 13);
  sys.add("0000:0d:00.0", "vfio-pci", -1);
  sys.add("0000:0e:00.0", "vfio-pci", 14);
  const auto o = sys.options();
  CHECK_THAT(open_error("vfio:0000:0a:00.0", o), ContainsSubstring("no PCI device 0000:0a:00.0"));
  CHECK_THAT(open_error("vfio:0000:0a:00.0", o), ContainsSubstring("setup_vfio.sh status"));
  const std::string wrong = open_error("vfio:0000:0b:00.0", o);
  CHECK_THAT(wrong, ContainsSubstring("bound to driver 'nvme', not vfio-pci"));
  CHECK_THAT(wrong, ContainsSubstring("scripts/setup_vfio.sh bind 0000:0b:00.0"));
  CHECK_THAT(open_error("vfio:0c:00.0", o), ContainsSubstring("bound to no driver"));
  const std::string noiommu = open_error("vfio:0000:0d:00.0", o);
  CHECK_THAT(noiommu, ContainsSubstring("no IOMMU group"));
  CHECK_THAT(noiommu, ContainsSubstring("intel_iommu=on"));
  const std::string nodev = open_error("vfio:0000:0e:00.0", o);
  CHECK_THAT(nodev, ContainsSubstring("dev-vfio/vfio"));
  CHECK_THAT(nodev, ContainsSubstring("modprobe vfio-pci"));
  try {
    VfioTransport t("vfio:0000:0e:00.0", o);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kNotFound);
  }
}

TEST_CASE("a PCI function that is not NVMe is named as such, not offered for binding", "[vfio][unit]") {
  FakeSysfs fake;
  fake.add("0000:00:1f.6", "e1000e", 7, "0x020000");
  fake.add("0000:00:1f.3", "vfio-pci", 8, "0x040300");
  for (const char* bdf : {"0000:00:1f.6", "0000:00:1f.3"}) {
    const std::string why = open_error(std::string("vfio:") + bdf, fake.options());
    CHECK_THAT(why, ContainsSubstring(std::string(bdf) + " is not an NVMe controller"));
    CHECK_THAT(why, !ContainsSubstring("setup_vfio.sh bind"));
  }
  CHECK_THAT(describe_not_nvme(SysfsPci(fake.root.string()), "0000:00:1f.6"), ContainsSubstring("network controller"));
  fake.add("0000:0b:00.0", "nvme", 9);
  CHECK(describe_not_nvme(SysfsPci(fake.root.string()), "0000:0b:00.0").empty());
}

TEST_CASE("a non-viable group lists the members still on host drivers", "[vfio][unit]") {
  FakeSysfs sys;
  sys.add("0000:0b:00.0", "vfio-pci", 7);
  sys.add("0000:0b:00.1", "snd_hda_intel", 7, "0x040300");
  sys.add("0000:0b:00.2", "", 7, "0x0c0330");
  const SysfsPci s(sys.root.string());
  CHECK(s.iommu_group("0000:0b:00.0") == 7);
  CHECK(s.driver("0000:0b:00.1") == "snd_hda_intel");
  CHECK(s.pci_class("0000:0b:00.0") == 0x010802);
  REQUIRE(s.group_members(7).size() == 3);
  const std::string msg = describe_unviable_group(s, 7, "0000:0b:00.0");
  CHECK_THAT(msg, ContainsSubstring("0000:0b:00.1 (driver snd_hda_intel)"));
  CHECK_THAT(msg, !ContainsSubstring("0000:0b:00.2"));
  CHECK_THAT(msg, ContainsSubstring("setup_vfio.sh bind"));
}

TEST_CASE("IOVAs start at 1 MiB, honour the valid ranges, keep guard pages and are reused", "[vfio][unit]") {
  IovaAllocator a;
  const auto x = a.allocate(4096);
  REQUIRE(x);
  CHECK(*x == IovaAllocator::kDefaultBase);
  const auto y = a.allocate(8192);
  REQUIRE(y);
  CHECK(*y >= *x + 4096 + IovaAllocator::kGuardBytes);
  const auto big = a.allocate(4u << 20);
  REQUIRE(big);
  CHECK(*big % (2u << 20) == 0);
  CHECK(a.bytes_in_use() == 4096 + 8192 + (4u << 20));
  a.release(*x, 4096);
  CHECK(a.allocate(4096) == x);  // first fit reuses the hole
  CHECK_FALSE(a.allocate(0));
  CHECK_FALSE(a.allocate(100));

  // x86's reported ranges exclude the MSI window; an allocation never straddles it.
  IovaAllocator r({{0, 0xfedfffff}, {0xfef00000, 0xffffffffffffull}});
  REQUIRE(r.ranges().size() == 2);
  CHECK(r.ranges()[0].start == IovaAllocator::kDefaultBase);
  std::set<uint64_t> seen;
  for (int i = 0; i < 40; ++i) {
    const auto v = r.allocate(128u << 20);
    REQUIRE(v);
    const uint64_t last = *v + (128u << 20) - 1;
    CHECK((last < 0xfee00000 || *v > 0xfeefffff));
    seen.insert(*v);
  }
  CHECK(seen.size() == 40);
  // Exhaustion is reported, not wrapped.
  IovaAllocator tiny({{0x100000, 0x100000 + 3 * 4096 - 1}});
  CHECK(tiny.allocate(4096));
  CHECK(tiny.allocate(4096));
  CHECK_FALSE(tiny.allocate(4096));
}

TEST_CASE("smaps parsing finds the VMA, its page size, lock and hugetlb flags", "[vfio][unit][noiommu]") {
  const std::string smaps =
      "7f0000000000-7f0000400000 rw-s 00000000 00:0f 1234 /anon_hugepage (deleted)\n"
      "Size:               4096 kB\n"
      "KernelPageSize:     2048 kB\n"
      "MMUPageSize:        2048 kB\n"
      "Locked:             4096 kB\n"
      "VmFlags: rd wr sh mr mw me ms lo de ht sd\n"
      "7f0000400000-7f0000401000 rw-p 00000000 00:00 0\n"
      "Size:                  4 kB\n"
      "KernelPageSize:        4 kB\n"
      "VmFlags: rd wr mr mw me ac sd\n";
  VmaInfo v;
  REQUIRE(find_vma(smaps, 0x7f0000200000, &v));
  CHECK(v.start == 0x7f0000000000);
  CHECK(v.end == 0x7f0000400000);
  CHECK(v.kernel_page_bytes == (2u << 20));
  CHECK(v.locked);
  CHECK(v.hugetlb);
  REQUIRE(find_vma(smaps, 0x7f0000400000, &v));
  CHECK(v.kernel_page_bytes == 4096);
  CHECK_FALSE(v.locked);
  CHECK_FALSE(v.hugetlb);
  CHECK_FALSE(find_vma(smaps, 0x1000, &v));
}

TEST_CASE("pagemap translation: one bus address per hugepage, refusals name the fix", "[vfio][unit][noiommu]") {
  const uint64_t huge = 2u << 20;
  const uint64_t base = 0x7f0000000000;
  // Two hugepages at PFNs 0x100000 and 0x300000 (each 512 contiguous 4 KiB frames).
  std::map<uint64_t, uint64_t> pfn_of_vpn;
  for (uint64_t i = 0; i < 512; ++i) {
    pfn_of_vpn[base / 4096 + i] = 0x100000 + i;
    pfn_of_vpn[base / 4096 + 512 + i] = 0x300000 + i;
  }
  auto reader = [&](uint64_t vpn, PagemapEntry* e) {
    auto it = pfn_of_vpn.find(vpn);
    e->raw = it == pfn_of_vpn.end() ? 0 : ((uint64_t(1) << 63) | it->second);
    return true;
  };
  const auto chunks = translate_chunks(base, 2 * huge, huge, reader);
  REQUIRE(chunks.size() == 2);
  CHECK(chunks[0] == 0x100000ull * 4096);
  CHECK(chunks[1] == 0x300000ull * 4096);
  const auto t = host::DmaTranslation::chunked(chunks, 21);
  CHECK(t.bus(huge + 12) == 0x300000ull * 4096 + 12);
  CHECK(t.contiguous_bytes_from(huge - 4096, 8192) == 4096);

  // Not resident.
  CHECK_THROWS_WITH(translate_chunks(base + 4 * huge, huge, huge, reader), ContainsSubstring("not resident"));
  // PFN hidden (not root / no CAP_SYS_ADMIN): present but PFN 0.
  auto hidden = [](uint64_t, PagemapEntry* e) {
    e->raw = uint64_t(1) << 63;
    return true;
  };
  try {
    translate_chunks(base, huge, huge, hidden);
    FAIL("PFN 0 accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kPermission);
    CHECK_THAT(std::string(e.what()), ContainsSubstring("CAP_SYS_ADMIN"));
  }
  // 4 KiB pages scattered in physical memory posing as a hugepage.
  auto scattered = [](uint64_t vpn, PagemapEntry* e) {
    e->raw = (uint64_t(1) << 63) | (vpn * 7 % 100000 + 1);
    return true;
  };
  CHECK_THROWS_WITH(translate_chunks(base, huge, huge, scattered), ContainsSubstring("not physically contiguous"));
  // Misaligned start.
  CHECK_THROWS_WITH(translate_chunks(base + 4096, huge, huge, reader), ContainsSubstring("hugepage boundary"));
}

TEST_CASE("no-IOMMU refuses ordinary and unpopulated memory; reads real hugepage PFNs as root", "[vfio][unit][noiommu]") {
  unsigned shift = 0;
  // Ordinary 4 KiB-page memory is refused, and the message says how to get hugepages.
  void* small = mmap(nullptr, 2u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  REQUIRE(small != MAP_FAILED);
  CHECK_THROWS_WITH(physical_chunks_of(small, 4096, &shift), ContainsSubstring("setup_vfio.sh hugepages"));
  // The pagemap of our own locked page gives a PFN when root (PFN 0 otherwise).
  REQUIRE(mlock(small, 4096) == 0);
  const int fd = open("/proc/self/pagemap", O_RDONLY);
  REQUIRE(fd >= 0);
  PagemapEntry e;
  REQUIRE(self_pagemap_reader(fd)(reinterpret_cast<uint64_t>(small) / 4096, &e));
  CHECK(e.present());
  if (geteuid() == 0) CHECK(e.pfn() != 0);
  close(fd);
  munmap(small, 2u << 20);

  void* huge = mmap(nullptr, 4u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE,
                    -1, 0);
  if (huge == MAP_FAILED) SKIP("no 2 MiB hugepages reserved here (scripts/setup_vfio.sh hugepages 4)");
  // hugetlb pages count as locked (the kernel never swaps them nor sets VM_LOCKED on them).
  if (geteuid() == 0) {
    const auto chunks = physical_chunks_of(huge, 4u << 20, &shift);
    CHECK(shift == 21);
    REQUIRE(chunks.size() == 2);
    CHECK(chunks[0] % (2u << 20) == 0);
    CHECK(chunks[1] % (2u << 20) == 0);
    CHECK(chunks[0] != chunks[1]);
  }
  // Not populated yet: refused as not resident.
  void* lazy = mmap(nullptr, 2u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
  if (lazy != MAP_FAILED) {
    CHECK_THROWS_WITH(physical_chunks_of(lazy, 2u << 20, &shift), ContainsSubstring("not resident"));
    munmap(lazy, 2u << 20);
  }
  munmap(huge, 4u << 20);
}
