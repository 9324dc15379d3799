// gpunvme read: the first read-only contact with a drive on vfio-pci. It copies blocks out through
// one I/O queue pair (CPU-initiated) to a file or stdout, so they can be compared with what the
// kernel's nvme driver read before the drive was handed over (docs/hardware.md).
#include <algorithm>

#include "host/cpu_io.h"
#include "host/error.h"
#include "host/locked_open.h"
#include "host/open_device.h"
#include "runtime/cli/args.h"
#include "runtime/cli/commands.h"
#include "runtime/guard/output_file.h"

namespace gpunvme::cli {

static Help read_help() {
  return {std::string("usage: gpunvme read --device DEVICE [--nsid N] [--lba L] [--bytes SIZE] [--out FILE]\n"
                      "\n"
                      "Reads --bytes (default 1M, whole blocks) from LBA L (default 0) of namespace N (default 1) and\n"
                      "writes them to FILE or, without --out, to stdout. It writes nothing to the device: FILE (or\n"
                      "stdout) on the device is refused, and FILE is replaced only once every block is written.\n"
                      "Compare with the kernel's view taken before binding, e.g.\n"
                      "  sudo dd if=/dev/nvme0n1 bs=1M count=1 iflag=direct | sha256sum      # before: on nvme\n"
                      "  sudo build/gpunvme read --device vfio:0000:0b:00.0 | sha256sum     # after: on vfio-pci\n"
                      "\n") +
              host::device_string_brief(),
          std::string("\n") + host::device_string_help()};
}

int cmd_read(int argc, char** argv) {
  Args args(argc, argv, 2, {"device", "nsid", "lba", "bytes", "out"}, {});
  if (args.help_asked()) return args.print_help("gpunvme read", read_help());
  if (!args.has("device")) throw UsageError("read needs --device (e.g. --device vfio:0000:0b:00.0)");
  const uint32_t nsid = args.get_u32("nsid", 1);
  const uint64_t lba = args.get_u64("lba", 0);
  const uint64_t bytes = args.get_size("bytes", 1ull << 20);
  // Before the device opens: an output on the device itself (or any block device) is refused.
  guard::OutputFile out = guard::OutputFile::open(args.get("out", "/dev/stdout"), {args.get("device")}, "--out");
  // A reader: the shared lock (refused while a deploy or another tool writes it), the image read-only.
  auto ctrl = host::open_locked(args.get("device"), host::LockMode::kShared, host::Access::kReadOnly, {}, nsid);
  const host::NamespaceInfo& ns = ctrl->namespace_info(nsid);
  if (bytes == 0 || bytes % ns.lba_bytes != 0)
    throw UsageError("--bytes must be a positive multiple of the " + std::to_string(ns.lba_bytes) + "-byte block");
  if (lba >= ns.blocks || bytes / ns.lba_bytes > ns.blocks - lba)
    throw UsageError("LBA " + std::to_string(lba) + " + " + std::to_string(bytes / ns.lba_bytes) +
                     " blocks is past the end of namespace " + std::to_string(nsid) + " (" +
                     std::to_string(ns.blocks) + " blocks)");
  auto qp = ctrl->create_io_queue_pair(1, 64);
  host::CpuIo io(*ctrl, *qp, nsid);
  const uint64_t chunk = std::min<uint64_t>(bytes, 8ull << 20);
  host::DmaBuffer buf(ctrl->transport(), chunk);
  for (uint64_t done = 0; done < bytes; done += chunk) {
    const uint64_t n = std::min(chunk, bytes - done);
    io.read(lba + done / ns.lba_bytes, n / ns.lba_bytes, buf, 0);
    out.write(buf.host(), n);
  }
  out.commit();
  ctrl->delete_io_queue_pair(*qp);
  ctrl->shutdown();
  return 0;
}

}  // namespace gpunvme::cli
