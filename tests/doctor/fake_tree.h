// A fabricated /sys, /proc and /dev under a temporary directory for the doctor's checks. healthy()
// lays out a ready machine (Intel, IOMMU on, vfio-pci loaded, drive 0000:0b:00.0 alone in group 14
// and bound to vfio-pci, GPU 0000:65:00.0 on the same NUMA node); tests then break one thing.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "host/gpu_bar_access.h"

namespace doctor_test {

namespace fs = std::filesystem;

inline constexpr const char* kDrive = "0000:0b:00.0";
inline constexpr const char* kGpu = "0000:65:00.0";

class FakeTree {
 public:
  FakeTree() {
    char tmpl[] = "/tmp/gpunvme-doctor-XXXXXX";
    root_ = ::mkdtemp(tmpl);
  }
  ~FakeTree() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  FakeTree(const FakeTree&) = delete;
  FakeTree& operator=(const FakeTree&) = delete;

  const std::string& root() const { return root_; }

  void file(const std::string& p, const std::string& content, int mode = 0644) {
    fs::create_directories(fs::path(root_ + p).parent_path());
    std::ofstream(root_ + p) << content << "\n";
    ::chmod((root_ + p).c_str(), mode_t(mode));
  }
  void dir(const std::string& p) { fs::create_directories(root_ + p); }
  void link(const std::string& p, const std::string& target) {
    fs::create_directories(fs::path(root_ + p).parent_path());
    fs::remove(root_ + p);
    fs::create_symlink(target, root_ + p);
  }
  void remove(const std::string& p) { fs::remove_all(root_ + p); }

  // A PCI function with its class, driver ("" for none), IOMMU group (-1 for none) and NUMA node.
  void pci(const std::string& bdf, const std::string& cls, const std::string& driver, int group, int numa = 0) {
    const std::string d = "/sys/bus/pci/devices/" + bdf;
    file(d + "/class", cls);
    file(d + "/vendor", "0x144d");
    file(d + "/device", "0xa80a");
    file(d + "/numa_node", std::to_string(numa));
    bind(bdf, driver);
    if (group >= 0) {
      const std::string g = std::to_string(group);
      dir("/sys/kernel/iommu_groups/" + g + "/devices");
      file("/sys/kernel/iommu_groups/" + g + "/type", "DMA-FQ");
      link(d + "/iommu_group", "../../../../kernel/iommu_groups/" + g);
      link("/sys/kernel/iommu_groups/" + g + "/devices/" + bdf, "../../../../bus/pci/devices/" + bdf);
    }
  }
  void bind(const std::string& bdf, const std::string& driver) {
    const std::string l = "/sys/bus/pci/devices/" + bdf + "/driver";
    fs::remove(root_ + l);
    if (!driver.empty()) link(l, "../../../../bus/pci/drivers/" + driver);
  }
  void memlock(const std::string& soft) {
    file("/proc/self/limits", "Limit                     Soft Limit           Hard Limit           Units\n"
                              "Max locked memory         " + soft + "            " + soft + "            bytes");
  }
  void hugepages(int total, int free_pages) {
    file("/proc/meminfo", "MemTotal:       65536000 kB\nHugePages_Total:   " + std::to_string(total) +
                              "\nHugePages_Free:    " + std::to_string(free_pages) + "\nHugepagesize:       2048 kB");
  }

  void healthy() {
    file("/proc/sys/kernel/osrelease", "6.8.0-45-generic");
    file("/proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro intel_iommu=on iommu=pt");
    file("/proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel");
    file("/proc/driver/nvidia/version",
         "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build");
    memlock("unlimited");
    hugepages(512, 512);
    dir("/sys/class/iommu/dmar0");
    dir("/sys/module/vfio_pci");
    dir("/sys/module/vfio_iommu_type1");
    file("/sys/module/vfio/parameters/enable_unsafe_noiommu_mode", "N");
    file("/dev/vfio/vfio", "", 0666);
    file("/dev/vfio/14", "", 0600);
    pci(kDrive, "0x010802", "vfio-pci", 14, 0);
    const std::string d = std::string("/sys/bus/pci/devices/") + kDrive;
    file(d + "/current_link_speed", "16.0 GT/s PCIe");
    file(d + "/max_link_speed", "16.0 GT/s PCIe");
    file(d + "/current_link_width", "4");
    file(d + "/max_link_width", "4");
    pci(kGpu, "0x030200", "nvidia", 30, 0);
    file(std::string("/sys/bus/pci/devices/") + kGpu + "/resource",
         "0x00000000fa000000 0x00000000faffffff 0x0000000000040200\n"
         "0x0000038000000000 0x00000397ffffffff 0x000000000014220c\n"
         "0x0000000000000000 0x0000000000000000 0x0000000000000000");
  }

 private:
  std::string root_;
};

inline gpunvme::host::GpuFacts gpu(const std::string& name, int major, int minor) {
  gpunvme::host::GpuFacts g;
  g.present = true;
  g.name = name;
  g.cc_major = major;
  g.cc_minor = minor;
  g.pci_bdf = kGpu;
  g.host_register_supported = 1;
  g.cuda_driver_version = 12080;
  return g;
}

inline gpunvme::host::GpuFacts h100() { return gpu("NVIDIA H100 80GB HBM3", 9, 0); }

}  // namespace doctor_test
