// What sysfs says about a PCI function: its driver, its IOMMU group and the group's other members.
// Every path is taken relative to a sysfs root so that tests can point it at a fake tree.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpunvme::vfio {

// "0000:0b:00.0" from "0000:0b:00.0" or "0b:00.0" (domain 0 assumed); nullopt when malformed.
std::optional<std::string> normalize_bdf(std::string_view text);

struct PciFunction {
  std::string bdf;     // 0000:0b:00.0
  std::string driver;  // bound driver, "" when none
};

class SysfsPci {
 public:
  explicit SysfsPci(std::string root = "/sys") : root_(std::move(root)) {}

  std::string device_dir(const std::string& bdf) const { return root_ + "/bus/pci/devices/" + bdf; }
  bool exists(const std::string& bdf) const;
  // Name of the bound driver ("nvme", "vfio-pci"), "" when unbound.
  std::string driver(const std::string& bdf) const;
  // IOMMU group number, or -1 when the device has no iommu_group link (IOMMU off).
  int iommu_group(const std::string& bdf) const;
  // Members of a group with their drivers, from <root>/kernel/iommu_groups/N/devices.
  std::vector<PciFunction> group_members(int group) const;
  // PCI class code as read from the `class` file (0x010802 for NVMe), or -1.
  long pci_class(const std::string& bdf) const;

 private:
  std::string root_;
};

// "" when `bdf`'s PCI class is NVMe (0x010802) or unreadable; else a message saying it is not an NVMe
// controller, its class, and where the NVMe drives are listed (binding it to vfio-pci would not help).
std::string describe_not_nvme(const SysfsPci& sysfs, const std::string& bdf);

// One-line description of why a group is not viable: the members still bound to host drivers.
std::string describe_unviable_group(const SysfsPci& sysfs, int group, const std::string& bdf);

}  // namespace gpunvme::vfio
