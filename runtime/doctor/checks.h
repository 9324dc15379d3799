// The doctor's individual checks (internal to runtime/doctor). Each reads the tree and returns one
// Check; what later checks need to know (IOMMU on, no-IOMMU mode, the device's group) is in Context.
#pragma once
#include <string>

#include "runtime/doctor/doctor.h"
#include "runtime/doctor/tree.h"

namespace gpunvme::doctor {

struct Context {
  const Tree& tree;
  const Environment& env;
  bool iommu_on = false;
  bool noiommu_on = false;  // vfio's enable_unsafe_noiommu_mode is Y
  bool vfio_loaded = false;
  std::string bdf;          // the normalized device, "" when none was given
  int group = -1;
};

// checks_platform.cpp
Check check_kernel(Context& c);
Check check_noiommu(Context& c);  // before check_iommu: an IOMMU-less machine may still run unsafely
Check check_iommu(Context& c);
Check check_vfio_modules(Context& c);
Check check_memlock(Context& c);
Check check_hugepages(Context& c);
Check check_nvme_list(Context& c);

// checks_device.cpp (only with a device)
Check check_device(Context& c);
Check check_vfio_driver(Context& c);
Check check_iommu_group(Context& c);
Check check_dev_vfio(Context& c);
Check check_pcie_link(Context& c);
Check check_numa(Context& c);

// checks_gpu.cpp
Check check_gpu(Context& c);
Check check_gpu_bar_map(Context& c);

// Helpers shared by the checks.
std::string mib(uint64_t bytes);                 // "256 MiB"
std::string pci_dir(const std::string& bdf);     // "/sys/bus/pci/devices/0000:0b:00.0"
std::string cpu_vendor(const Tree& tree);        // "intel", "amd", "" from /proc/cpuinfo

}  // namespace gpunvme::doctor
