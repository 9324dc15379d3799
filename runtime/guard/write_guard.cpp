#include "runtime/guard/write_guard.h"

#include <vector>

#include <sys/stat.h>

#include "host/emulator/config.h"
#include "host/vfio/vfio_transport.h"
#include "runtime/deploy/safety.h"

namespace gpunvme::guard {
namespace {

// The first namespace of an emu: device whose backing path is a block device, described; or "".
std::string emu_block_backing(std::string_view device) {
  const emu::ControllerConfig cfg = emu::parse_emu_device(device);
  for (size_t i = 0; i < cfg.namespaces.size(); ++i) {
    const emu::NamespaceConfig& ns = cfg.namespaces[i];
    struct stat st{};
    if (ns.backing == emu::Backing::kFile && ::stat(ns.path.c_str(), &st) == 0 && S_ISBLK(st.st_mode))
      return ns.path + " (namespace " + std::to_string(i + 1) + " of this emu: device) is a block device";
  }
  return "";
}

// Whether an emu: device has a generated namespace (emu:gen): nothing can be written to it, whatever the flags.
bool emu_generated(std::string_view device) {
  if (!emu::is_emu_device(device)) return false;
  for (const emu::NamespaceConfig& ns : emu::parse_emu_device(device).namespaces)
    if (ns.backing == emu::Backing::kGenerated) return true;
  return false;
}

}  // namespace

std::string real_device_reason(std::string_view device) {
  if (emu::is_emu_device(device)) return emu_block_backing(device);
  if (vfio::is_vfio_device_string(device)) return "it is a real NVMe controller (vfio:)";
  return "it is not an emulated device";
}

void check_write_allowed(std::string_view device, const WritePermission& permission, const std::string& what) {
  if (emu_generated(device))
    throw deploy::RefusedError("refusing to write to " + std::string(device) + ": emu:gen is read-only (its bytes are a "
                               "generated model computed on read), and " + what +
                               "; write to an image file instead (emu:/path/disk.img,size=...)");
  if (permission.allow_write) return;
  const std::string why = real_device_reason(device);
  if (why.empty()) return;
  throw deploy::RefusedError("refusing to write to " + std::string(device) + ": " + why + ", and " + what +
                             ", destroying what is there; add --allow-write if that is what you want");
}

void check_no_signatures(const model::BlockIo& io, uint64_t start_lba, const WritePermission& permission) {
  if (permission.force) return;
  // The guard's rule is about formats (a partition table, a filesystem, swap, LUKS, LVM): bytes no
  // prober recognises are what the tools themselves leave behind (the demo's patterns, nvme_perf's
  // fill) and must not stop the next run. Deploy alone refuses those too (deploy::check_target).
  std::vector<deploy::Signature> found = deploy::scan_device(io, start_lba, start_lba != 0);
  std::erase_if(found, [](const deploy::Signature& s) { return !s.known_format; });
  if (found.empty()) return;
  std::string list;
  for (const auto& s : found) list += (list.empty() ? "" : "; ") + s.what + " at LBA " + std::to_string(s.lba);
  throw deploy::RefusedError("refusing to write to " + io.name + ": signature found: " + list +
                                 " (wipe it first, e.g. `wipefs -a`, or add --force to overwrite it anyway)",
                             found);
}

}  // namespace gpunvme::guard
