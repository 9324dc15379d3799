// Machine-wide checks: kernel, IOMMU, VFIO modules, no-IOMMU mode, locked-memory limit, hugepages.
#include <limits>

#include "runtime/doctor/checks.h"

namespace gpunvme::doctor {

std::string mib(uint64_t bytes) {
  if (bytes == std::numeric_limits<uint64_t>::max()) return "unlimited";
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (1ull << 20)) return std::to_string((bytes + (1ull << 20) - 1) >> 20) + " MiB";
  return std::to_string((bytes + 1023) >> 10) + " KiB";
}

std::string pci_dir(const std::string& bdf) { return "/sys/bus/pci/devices/" + bdf; }

std::string cpu_vendor(const Tree& tree) {
  const std::string info = tree.read("/proc/cpuinfo").value_or("");
  if (info.find("GenuineIntel") != std::string::npos) return "intel";
  if (info.find("AuthenticAMD") != std::string::npos) return "amd";
  return "";
}

Check check_kernel(Context& c) {
  Check k{"kernel", Severity::kInfo, "", "", {}};
  const std::string release = c.tree.read("/proc/sys/kernel/osrelease").value_or("unknown");
  const std::string cmdline = c.tree.read("/proc/cmdline").value_or("");
  k.summary = "Linux " + release + "; gpunvme needs no kernel module (VFIO is in every distribution kernel)";
  k.facts = {{"release", release}, {"cmdline", cmdline}};
  return k;
}

Check check_noiommu(Context& c) {
  Check k{"noiommu", Severity::kInfo, "", "", {}};
  c.vfio_loaded = c.tree.exists("/sys/module/vfio");
  const auto mode = c.tree.read("/sys/module/vfio/parameters/enable_unsafe_noiommu_mode");
  c.noiommu_on = mode && (*mode == "Y" || *mode == "1");
  std::string state;
  if (c.noiommu_on) {
    state = "enabled";
    k.severity = Severity::kWarn;
    k.summary = "VFIO no-IOMMU mode is enabled: the drive can DMA anywhere in memory (unsafe, root only, "
                "hugepage-backed buffers by physical address)";
    k.fix = "prefer the IOMMU: turn it on (see the iommu check) and reload vfio without "
            "enable_unsafe_noiommu_mode";
  } else if (mode) {
    state = "available";
    k.summary = "VFIO no-IOMMU mode is available but off (the safe default)";
    k.fix = "only if this machine has no IOMMU: sudo modprobe -r vfio-pci vfio && sudo modprobe vfio "
            "enable_unsafe_noiommu_mode=1 && sudo modprobe vfio-pci";
  } else if (c.vfio_loaded) {
    state = "absent";
    k.summary = "this kernel has no VFIO no-IOMMU mode (CONFIG_VFIO_NOIOMMU not set); the IOMMU is the only way";
  } else {
    state = "unknown";
    k.summary = "VFIO is not loaded, so no-IOMMU mode cannot be judged yet";
  }
  k.facts = {{"state", state}};
  return k;
}

Check check_iommu(Context& c) {
  Check k{"iommu", Severity::kOk, "", "", {}};
  const auto units = c.tree.list("/sys/class/iommu");
  const auto groups = c.tree.list("/sys/kernel/iommu_groups");
  const std::string cmdline = c.tree.read("/proc/cmdline").value_or("");
  auto has = [&](const char* arg) { return (" " + cmdline + " ").find(std::string(" ") + arg + " ") != std::string::npos; };
  std::string mode = "translated (kernel default)";
  if (has("iommu=pt")) mode = "passthrough for host drivers (iommu=pt); VFIO devices are still translated";
  if (has("intel_iommu=off") || has("amd_iommu=off") || has("iommu=off")) mode = "disabled on the kernel command line";
  c.iommu_on = !groups.empty();
  std::string unit_list;
  for (const auto& u : units) unit_list += (unit_list.empty() ? "" : ",") + u;
  k.facts = {{"enabled", c.iommu_on ? "true" : "false"},
             {"units", unit_list},
             {"groups", std::to_string(groups.size())},
             {"mode", mode}};
  if (c.iommu_on) {
    k.summary = "IOMMU on: " + std::to_string(groups.size()) + " groups" +
                (unit_list.empty() ? "" : " (units " + unit_list + ")") + ", " + mode;
    return k;
  }
  const std::string vendor = cpu_vendor(c.tree);
  const std::string arg = vendor == "amd" ? "amd_iommu=on iommu=pt" : "intel_iommu=on iommu=pt";
  k.severity = c.noiommu_on ? Severity::kWarn : Severity::kFail;
  k.summary = "IOMMU off: no IOMMU groups in /sys/kernel/iommu_groups";
  if (has("intel_iommu=on") || has("amd_iommu=on"))
    k.summary += " although the kernel command line asks for one: the firmware has it disabled, or this is a VM "
                 "without a virtual IOMMU";
  else if (mode.rfind("disabled", 0) == 0)
    k.summary += " (" + mode + ")";
  if (c.noiommu_on) k.summary += "; running in VFIO no-IOMMU mode instead (unsafe)";
  k.fix = std::string("enable ") + (vendor == "amd" ? "AMD-Vi / IOMMU (and SVM)" : "VT-d") +
          " in the firmware setup, then add `" + arg +
          "` to the kernel command line: Debian/Ubuntu: add it to GRUB_CMDLINE_LINUX in /etc/default/grub, "
          "sudo update-grub; Fedora/RHEL: sudo grubby --update-kernel=ALL --args='" + arg + "'; then reboot";
  return k;
}

Check check_vfio_modules(Context& c) {
  Check k{"vfio_modules", Severity::kOk, "", "", {}};
  const bool pci = c.tree.exists("/sys/module/vfio_pci") || c.tree.exists("/sys/bus/pci/drivers/vfio-pci");
  const bool type1 = c.tree.exists("/sys/module/vfio_iommu_type1");
  const bool container = c.tree.exists("/dev/vfio/vfio");
  k.facts = {{"vfio_pci", pci ? "true" : "false"},
             {"vfio_iommu_type1", type1 ? "true" : "false"},
             {"dev_vfio_vfio", container ? "true" : "false"}};
  if (pci && container && (type1 || c.noiommu_on)) {
    k.summary = "vfio-pci loaded, /dev/vfio/vfio present";
    return k;
  }
  k.severity = Severity::kFail;
  k.summary = std::string("VFIO not ready:") + (pci ? "" : " vfio-pci not loaded;") +
              (type1 || c.noiommu_on ? "" : " vfio_iommu_type1 not loaded;") + (container ? "" : " no /dev/vfio/vfio");
  k.fix = "sudo modprobe vfio-pci (loads vfio and vfio_iommu_type1 too); at every boot: echo vfio-pci | sudo tee "
          "/etc/modules-load.d/vfio-pci.conf";
  return k;
}

uint64_t pinned_bytes_needed(const Environment& env) {
  uint64_t cids = 1;
  while (cids < env.entries) cids <<= 1;
  const uint64_t rings = uint64_t(env.queues) * env.entries * (64 + 16);
  const uint64_t prp_lists = uint64_t(env.queues) * cids * 2048;  // 1 MiB commands: 256 entries x 8 B
  const uint64_t admin = 64 << 10;
  return rings + prp_lists + admin + env.buffer_bytes;
}

Check check_memlock(Context& c) {
  Check k{"memlock", Severity::kOk, "", "", {}};
  const uint64_t need = pinned_bytes_needed(c.env);
  const auto limit = parse_memlock_limit(c.tree.read("/proc/self/limits").value_or(""));
  k.facts = {{"limit_bytes", limit ? std::to_string(*limit) : "unknown"},
             {"needed_bytes", std::to_string(need)},
             {"root", c.env.euid == 0 ? "true" : "false"}};
  const std::string budget = mib(need) + " (" + std::to_string(c.env.queues) + " queues x " +
                             std::to_string(c.env.entries) + " entries, their PRP lists, " +
                             mib(c.env.buffer_bytes) + " of DMA buffers)";
  if (c.env.euid == 0) {
    k.summary = "running as root: locked memory is not limited (gpunvme will pin about " + budget + ")";
    return k;
  }
  if (!limit) {
    k.severity = Severity::kWarn;
    k.summary = "cannot read the locked-memory limit from /proc/self/limits; gpunvme pins about " + budget;
    k.fix = "check `ulimit -l`: it must be at least " + mib(need);
    return k;
  }
  if (*limit >= need) {
    k.summary = "locked-memory limit " + mib(*limit) + " covers the " + budget;
    return k;
  }
  k.severity = Severity::kFail;
  k.summary = "locked-memory limit " + mib(*limit) + " is below what VFIO must pin: " + budget +
              "; VFIO_IOMMU_MAP_DMA would fail with ENOMEM";
  k.fix = "ulimit -l unlimited (in this shell; needs the hard limit), or add `" +
          std::string("<user> - memlock unlimited") +
          "` to /etc/security/limits.conf and log in again (systemd units: LimitMEMLOCK=infinity), or run as root";
  return k;
}

Check check_hugepages(Context& c) {
  Check k{"hugepages", Severity::kOk, "", "", {}};
  const std::string meminfo = c.tree.read("/proc/meminfo").value_or("");
  const uint64_t total = meminfo_value(meminfo, "HugePages_Total").value_or(0);
  const uint64_t free_pages = meminfo_value(meminfo, "HugePages_Free").value_or(0);
  const uint64_t page_kb = meminfo_value(meminfo, "Hugepagesize").value_or(2048);
  const uint64_t free_bytes = free_pages * page_kb * 1024;
  const uint64_t need = pinned_bytes_needed(c.env);
  k.facts = {{"total", std::to_string(total)}, {"free", std::to_string(free_pages)},
             {"page_kib", std::to_string(page_kb)}, {"free_bytes", std::to_string(free_bytes)}};
  const uint64_t pages_needed = (need + page_kb * 1024 - 1) / (page_kb * 1024);
  const std::string reserve = "sudo scripts/setup_vfio.sh hugepages " + std::to_string(pages_needed + 16);
  if (!c.iommu_on && c.noiommu_on) {
    if (free_bytes >= need) {
      k.summary = std::to_string(free_pages) + " free hugepages (" + mib(free_bytes) +
                  ") cover the DMA memory no-IOMMU mode needs (" + mib(need) + ")";
      return k;
    }
    k.severity = Severity::kFail;
    k.summary = "no-IOMMU mode needs physically contiguous DMA memory: " + mib(need) + " of hugepages, " +
                mib(free_bytes) + " free";
    k.fix = reserve;
    return k;
  }
  if (free_pages == 0) {
    k.severity = Severity::kInfo;
    k.summary = "no free hugepages: DMA buffers use 4 KiB pages (fine under an IOMMU; 2 MiB pages need fewer "
                "IOMMU mappings and TLB entries)";
    k.fix = "optional: " + reserve;
    return k;
  }
  k.summary = std::to_string(free_pages) + " free hugepages of " + std::to_string(page_kb) + " KiB (" +
              mib(free_bytes) + ")";
  return k;
}

Check check_nvme_list(Context& c) {
  Check k{"nvme_controllers", Severity::kInfo, "", "", {}};
  std::string list;
  uint32_t n = 0;
  for (const auto& bdf : c.tree.list("/sys/bus/pci/devices")) {
    if (c.tree.read(pci_dir(bdf) + "/class").value_or("") != "0x010802") continue;
    const std::string drv = c.tree.link_name(pci_dir(bdf) + "/driver");
    const std::string grp = c.tree.link_name(pci_dir(bdf) + "/iommu_group");
    list += (list.empty() ? "" : ", ") + bdf + " (" + (drv.empty() ? "no driver" : drv) +
            (grp.empty() ? "" : ", group " + grp) + ")";
    k.facts.push_back({bdf, drv});
    ++n;
  }
  if (n == 0) {
    k.severity = c.env.device.empty() ? Severity::kInfo : Severity::kWarn;
    k.summary = "no NVMe controller (PCI class 0x010802) in /sys/bus/pci/devices";
    return k;
  }
  k.summary = std::to_string(n) + " NVMe controller" + (n == 1 ? "" : "s") + ": " + list;
  if (c.env.device.empty()) k.fix = "check one: gpunvme doctor --device vfio:BDF";
  return k;
}

}  // namespace gpunvme::doctor
