#include "host/vfio/sysfs_pci.h"

#include <cstdint>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

namespace gpunvme::vfio {
namespace {

std::string link_basename(const std::string& path) {
  char buf[4096];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  buf[n] = 0;
  std::string target(buf);
  const auto slash = target.rfind('/');
  return slash == std::string::npos ? target : target.substr(slash + 1);
}

bool all_hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(uint8_t(c)) != 0; });
}

}  // namespace

std::optional<std::string> normalize_bdf(std::string_view text) {
  // domain:bus:device.function with domain optional; hex digits; widths 4:2:2.1.
  std::string s(text);
  std::transform(s.begin(), s.end(), s.begin(), [](char c) { return char(std::tolower(uint8_t(c))); });
  if (std::count(s.begin(), s.end(), ':') == 1) s = "0000:" + s;
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return std::nullopt;
  if (!all_hex(std::string_view(s).substr(0, 4)) || !all_hex(std::string_view(s).substr(5, 2)) ||
      !all_hex(std::string_view(s).substr(8, 2)) || s[11] < '0' || s[11] > '7')
    return std::nullopt;
  return s;
}

bool SysfsPci::exists(const std::string& bdf) const { return ::access(device_dir(bdf).c_str(), F_OK) == 0; }

std::string SysfsPci::driver(const std::string& bdf) const { return link_basename(device_dir(bdf) + "/driver"); }

int SysfsPci::iommu_group(const std::string& bdf) const {
  const std::string g = link_basename(device_dir(bdf) + "/iommu_group");
  if (g.empty() || !std::all_of(g.begin(), g.end(), [](char c) { return std::isdigit(uint8_t(c)) != 0; })) return -1;
  return std::atoi(g.c_str());
}

std::vector<PciFunction> SysfsPci::group_members(int group) const {
  std::vector<PciFunction> out;
  const std::string dir = root_ + "/kernel/iommu_groups/" + std::to_string(group) + "/devices";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    out.push_back({e->d_name, link_basename(dir + "/" + e->d_name + "/driver")});
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const PciFunction& a, const PciFunction& b) { return a.bdf < b.bdf; });
  return out;
}

long SysfsPci::pci_class(const std::string& bdf) const {
  std::ifstream f(device_dir(bdf) + "/class");
  std::string s;
  if (!(f >> s)) return -1;
  return std::strtol(s.c_str(), nullptr, 16);
}

std::string describe_not_nvme(const SysfsPci& sysfs, const std::string& bdf) {
  constexpr long kNvmeClass = 0x010802;  // mass storage, non-volatile memory, NVM Express
  const long cls = sysfs.pci_class(bdf);
  if (cls < 0 || cls == kNvmeClass) return "";
  static const char* const kBaseClass[] = {"unclassified",   "mass storage controller", "network controller",
                                           "display controller", "multimedia controller", "memory controller",
                                           "bridge",         "communication controller", "system peripheral",
                                           "input device",   "docking station",          "processor",
                                           "serial bus controller"};
  const long base = cls >> 16;
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%06lx", cls);
  return bdf + " is not an NVMe controller (PCI class " + hex +
         (base < long(std::size(kBaseClass)) ? std::string(": ") + kBaseClass[base] : std::string()) +
         "; NVMe controllers are class 0x010802). Pick an NVMe drive: scripts/setup_vfio.sh status lists them";
}

std::string describe_unviable_group(const SysfsPci& sysfs, int group, const std::string& bdf) {
  std::string bound;
  for (const auto& m : sysfs.group_members(group)) {
    if (m.bdf == bdf) continue;
    // A group is viable when every member is bound to a VFIO driver, pci-stub, or nothing at all.
    if (m.driver.empty() || m.driver == "vfio-pci" || m.driver == "pci-stub") continue;
    if (!bound.empty()) bound += ", ";
    bound += m.bdf + " (driver " + m.driver + ")";
  }
  std::string msg = "IOMMU group " + std::to_string(group) + " of " + bdf + " is not viable: ";
  if (bound.empty()) {
    msg += "every device in the group must be bound to vfio-pci or to no driver";
  } else {
    msg += "these devices in the same group are still bound to host drivers: " + bound +
           ". Unbind them too (scripts/setup_vfio.sh bind BDF for each), or move the drive to a slot with "
           "its own IOMMU group (ACS)";
  }
  return msg;
}

}  // namespace gpunvme::vfio
