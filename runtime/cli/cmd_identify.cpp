#include <cstdio>

#include "host/open_device.h"
#include "runtime/cli/args.h"
#include "runtime/cli/commands.h"
#include "runtime/cli/format.h"

namespace gpunvme::cli {

static Help identify_help() {
  return {std::string("usage: gpunvme identify --device DEVICE\n"
                      "\n"
                      "Brings the controller up from user space (reset, admin queue, enable), runs Identify Controller\n"
                      "and Identify Namespace for every active namespace, and prints a summary like `nvme id-ctrl`.\n"
                      "It writes nothing to the namespaces.\n"
                      "\n") +
              host::device_string_brief(),
          std::string("\n") + host::device_string_help()};
}

int cmd_identify(int argc, char** argv) {
  Args args(argc, argv, 2, {"device"}, {});
  if (args.help_asked()) return args.print_help("gpunvme identify", identify_help());
  if (!args.has("device")) throw UsageError("identify needs --device (e.g. --device emu:ram,size=1G)");
  auto ctrl = host::open_controller(args.get("device"), {}, host::Access::kReadOnly);  // identify changes nothing
  const auto& id = ctrl->identify();
  const auto cap = ctrl->cap();
  const uint64_t mt = ctrl->max_transfer_bytes();
  std::printf("controller  %s\n", ctrl->transport().name().c_str());
  std::printf("  model          %s\n", trim_id(id.mn, sizeof id.mn).c_str());
  std::printf("  serial         %s\n", trim_id(id.sn, sizeof id.sn).c_str());
  std::printf("  firmware       %s\n", trim_id(id.fr, sizeof id.fr).c_str());
  std::printf("  PCI vendor     0x%04x\n", id.vid);
  std::printf("  NVMe version   %u.%u.%u\n", ctrl->version().major(), ctrl->version().minor(), ctrl->version().tertiary());
  std::printf("  max transfer   %s per command (MDTS %u)\n", mt ? human_bytes(double(mt)).c_str() : "unlimited", id.mdts);
  std::printf("  I/O queues     %u pairs granted, up to %u entries each (CAP.MQES+1)\n", ctrl->io_queues_granted(),
              cap.max_queue_entries());
  std::printf("  page size      %s (CAP.MPSMIN %s, MPSMAX %s)\n", human_bytes(double(ctrl->page_bytes())).c_str(),
              human_bytes(double(cap.min_page_bytes())).c_str(), human_bytes(double(cap.max_page_bytes())).c_str());
  std::printf("  doorbells      stride %u bytes (CAP.DSTRD %u)\n", cap.doorbell_stride_bytes(), cap.dstrd());
  std::printf("  ready timeout  %u ms (CAP.TO)\n", cap.ready_timeout_ms());
  std::printf("  optional cmds  ONCS 0x%04x, volatile write cache %s\n", id.oncs, (id.vwc & 1) ? "present" : "absent");
  std::printf("namespaces  %zu active (NN %u)\n", ctrl->namespaces().size(), id.nn);
  for (const auto& ns : ctrl->namespaces())
    std::printf("  nsid %-3u %12llu blocks x %4u B = %s (LBA format %u)\n", ns.nsid,
                static_cast<unsigned long long>(ns.blocks), ns.lba_bytes, human_bytes(double(ns.bytes())).c_str(),
                ns.lba_format);
  ctrl->shutdown();
  return 0;
}

}  // namespace gpunvme::cli
