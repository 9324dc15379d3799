// Checks of the drive named by --device: present and NVMe, bound to vfio-pci, a viable IOMMU group,
// /dev/vfio access, PCIe link, NUMA placement next to the GPU.
#include <cstdlib>

#include "runtime/doctor/checks.h"

namespace gpunvme::doctor {
namespace {

// Drivers that leave an IOMMU group usable by VFIO: none, VFIO itself, pci-stub, and the PCIe port
// driver of bridges (it manages no DMA, Linux >= 5.19).
bool driver_keeps_group_viable(const std::string& drv) {
  return drv.empty() || drv == "vfio-pci" || drv == "pci-stub" || drv == "pcieport";
}

std::string bind_cmd(const std::string& bdf) { return "sudo scripts/setup_vfio.sh bind " + bdf; }

}  // namespace

Check check_device(Context& c) {
  Check k{"device", Severity::kOk, "", "", {}};
  const std::string dir = pci_dir(c.bdf);
  if (!c.tree.exists(dir)) {
    k.severity = Severity::kFail;
    k.summary = "no PCI device " + c.bdf;
    k.fix = "list NVMe controllers with scripts/setup_vfio.sh status (or lspci -D -d ::0108) and pass one of them";
    return k;
  }
  const std::string cls = c.tree.read(dir + "/class").value_or("");
  const std::string vendor = c.tree.read(dir + "/vendor").value_or("");
  const std::string device = c.tree.read(dir + "/device").value_or("");
  k.facts = {{"bdf", c.bdf}, {"class", cls}, {"vendor", vendor}, {"device", device}};
  if (cls != "0x010802") {
    k.severity = Severity::kFail;
    k.summary = c.bdf + " is not an NVMe controller (PCI class " + cls + ", NVMe is 0x010802)";
    k.fix = "pick an NVMe function: scripts/setup_vfio.sh status";
    return k;
  }
  k.summary = c.bdf + " is an NVMe controller (vendor " + vendor + ", device " + device + ")";
  return k;
}

Check check_vfio_driver(Context& c) {
  Check k{"vfio_driver", Severity::kOk, "", "", {}};
  const std::string drv = c.tree.link_name(pci_dir(c.bdf) + "/driver");
  k.facts = {{"driver", drv}};
  if (drv == "vfio-pci") {
    k.summary = c.bdf + " is bound to vfio-pci";
    return k;
  }
  k.severity = Severity::kFail;
  if (drv == "nvme") {
    k.summary = c.bdf + " is bound to the kernel nvme driver (its namespaces are /dev/nvme*n*)";
    k.fix = "unmount every filesystem on it (and check it is not the boot drive), then " + bind_cmd(c.bdf) +
            "; back to the kernel: sudo scripts/setup_vfio.sh unbind " + c.bdf;
  } else {
    k.summary = c.bdf + " is bound to " + (drv.empty() ? std::string("no driver") : "driver '" + drv + "'") +
                ", not vfio-pci";
    k.fix = bind_cmd(c.bdf);
  }
  return k;
}

Check check_iommu_group(Context& c) {
  Check k{"iommu_group", Severity::kOk, "", "", {}};
  const std::string g = c.tree.link_name(pci_dir(c.bdf) + "/iommu_group");
  if (g.empty()) {
    k.severity = Severity::kFail;
    k.summary = c.bdf + " has no IOMMU group (no iommu_group link): the IOMMU is off";
    k.fix = c.noiommu_on ? "bind it to vfio-pci; no-IOMMU mode then gives it a group: " + bind_cmd(c.bdf)
                         : "turn the IOMMU on (see the iommu check)";
    return k;
  }
  c.group = std::atoi(g.c_str());
  const std::string gdir = "/sys/kernel/iommu_groups/" + g;
  const std::string type = c.tree.read(gdir + "/type").value_or("");
  std::string members, blockers, unbind;
  for (const auto& m : c.tree.list(gdir + "/devices")) {
    const std::string drv = c.tree.link_name(gdir + "/devices/" + m + "/driver");
    members += (members.empty() ? "" : ", ") + m + " (" + (drv.empty() ? "no driver" : drv) + ")";
    if (m == c.bdf || driver_keeps_group_viable(drv)) continue;
    blockers += (blockers.empty() ? "" : ", ") + m + " (" + drv + ")";
    unbind += (unbind.empty() ? "" : " && ") + bind_cmd(m);
  }
  k.facts = {{"group", g}, {"domain_type", type}, {"members", members}};
  if (!blockers.empty()) {
    k.severity = Severity::kFail;
    k.summary = "IOMMU group " + g + " is shared with devices still on host drivers: " + blockers +
                "; VFIO refuses a group until every member is on vfio-pci or no driver";
    k.fix = "give those devices to VFIO too (" + unbind +
            "), or move the drive to a slot with its own group (a CPU-attached slot, or enable ACS in the "
            "firmware); do not use the out-of-tree pcie_acs_override patch";
    return k;
  }
  k.summary = "IOMMU group " + g + (type.empty() ? "" : " (domain " + type + ")") + ": " + members;
  return k;
}

Check check_dev_vfio(Context& c) {
  Check k{"dev_vfio", Severity::kOk, "", "", {}};
  const std::string container = "/dev/vfio/vfio";
  std::string node = "/dev/vfio/" + std::to_string(c.group);
  if (c.group >= 0 && !c.tree.exists(node) && c.tree.exists("/dev/vfio/noiommu-" + std::to_string(c.group)))
    node = "/dev/vfio/noiommu-" + std::to_string(c.group);
  const NodeAccess ca = c.tree.access(container), na = c.tree.access(node);
  k.facts = {{"container", container}, {"group_node", c.group >= 0 ? node : ""},
             {"euid", std::to_string(c.env.euid)}};
  if (c.group < 0 || !na.exists) {
    k.severity = Severity::kFail;
    k.summary = c.group < 0 ? "no IOMMU group, so no /dev/vfio node"
                            : node + " is missing (it appears when the group is bound to vfio-pci)";
    k.fix = bind_cmd(c.bdf);
    return k;
  }
  const bool ok = read_write_allowed(ca, c.env.euid) && read_write_allowed(na, c.env.euid);
  if (ok) {
    k.summary = container + " and " + node + " are open to this user";
    return k;
  }
  k.severity = Severity::kFail;
  k.summary = "this user (uid " + std::to_string(c.env.euid) + ") cannot open " +
              (read_write_allowed(ca, c.env.euid) ? node : container + " / " + node) + " read-write";
  k.fix = "run as root, or give the node to your user: sudo chown $USER " + node +
          " (until the next bind; for good, a udev rule: SUBSYSTEM==\"vfio\", OWNER=\"$USER\" in "
          "/etc/udev/rules.d/99-gpunvme-vfio.rules); memlock must then allow the pinned memory";
  return k;
}

Check check_pcie_link(Context& c) {
  Check k{"pcie_link", Severity::kOk, "", "", {}};
  const std::string dir = pci_dir(c.bdf);
  const std::string cur_speed = c.tree.read(dir + "/current_link_speed").value_or("");
  const std::string max_speed = c.tree.read(dir + "/max_link_speed").value_or("");
  const std::string cur_width = c.tree.read(dir + "/current_link_width").value_or("");
  const std::string max_width = c.tree.read(dir + "/max_link_width").value_or("");
  k.facts = {{"speed", cur_speed}, {"max_speed", max_speed}, {"width", cur_width}, {"max_width", max_width}};
  if (cur_speed.empty() || cur_width.empty()) {
    k.severity = Severity::kInfo;
    k.summary = "PCIe link speed not reported";
    return k;
  }
  k.summary = "PCIe link x" + cur_width + " at " + cur_speed;
  // A drive idling in a low-power state may report a lower speed; width does not change that way.
  if ((!max_width.empty() && cur_width != max_width) || (!max_speed.empty() && cur_speed != max_speed)) {
    k.severity = Severity::kWarn;
    k.summary += ", below its maximum x" + max_width + " at " + max_speed;
    k.fix = "a narrower or slower link caps throughput: use a slot wired for x" + max_width +
            " (some share lanes with M.2 or SATA ports; see the board manual); an idle drive may report a "
            "lower speed until it is busy";
  }
  return k;
}

Check check_numa(Context& c) {
  Check k{"numa", Severity::kOk, "", "", {}};
  const std::string drive_node = c.tree.read(pci_dir(c.bdf) + "/numa_node").value_or("-1");
  const std::string gpu_node =
      c.env.gpu.present && !c.env.gpu.pci_bdf.empty() ? c.tree.read(pci_dir(c.env.gpu.pci_bdf) + "/numa_node").value_or("-1")
                                                       : "";
  k.facts = {{"drive_node", drive_node}, {"gpu_node", gpu_node}};
  if (gpu_node.empty()) {
    k.severity = Severity::kInfo;
    k.summary = "drive on NUMA node " + drive_node + " (no GPU to compare with)";
    return k;
  }
  if (drive_node == gpu_node || drive_node == "-1" || gpu_node == "-1") {
    k.summary = "drive and GPU on the same NUMA node (" + drive_node + " / " + gpu_node + ")";
    return k;
  }
  k.severity = Severity::kWarn;
  k.summary = "drive on NUMA node " + drive_node + ", GPU on node " + gpu_node +
              ": every DMA and doorbell crosses the socket link";
  k.fix = "move the drive or the GPU to a slot of the same socket; meanwhile keep the process and its DMA memory "
          "next to the GPU: numactl --cpunodebind=" + gpu_node + " --membind=" + gpu_node + " gpunvme ...";
  return k;
}

}  // namespace gpunvme::doctor
