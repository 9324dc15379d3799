// The one rule for every tool that writes to a device (gpunvme demo, nvme_perf writes and --fill,
// bench/layer_stream, the examples, gpunvme deploy and its --print-dd):
//   - a real device needs --allow-write: a vfio: controller, or an emu: namespace whose backing file
//     is a block device (emu:/dev/nvme0n1 writes the real disk, so it counts as one);
//   - an emu:gen namespace (a generated model computed on read) is refused whatever the flags;
//   - a device that holds a partition table or a filesystem (or swap, LUKS, LVM) signature at LBA 0
//     or where the write starts needs --force as well, whatever kind of device it is.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/model/block_io.h"

namespace gpunvme::guard {

struct WritePermission {
  bool allow_write = false;  // --allow-write
  bool force = false;        // --force
};

// The two flags' lines for a tool's --help.
inline constexpr const char* kWriteFlagsHelp =
    "  --allow-write     permit writing to a real device: vfio:, or emu: on a block device (/dev/...)\n"
    "  --force           write even over a partition table or filesystem signature\n";

// Why writing to `device` can destroy data that is not the tool's own ("" when it cannot: emu:ram,
// emu:null, emu: on regular files). Decided from the device string and the backing paths, before
// opening. Throws gpunvme::Error for a malformed emu: string.
std::string real_device_reason(std::string_view device);

// Before opening: throws deploy::RefusedError when `device` is real and permission lacks
// allow_write; the message names the device, why it is real, `what` (what the tool would write)
// and --allow-write.
void check_write_allowed(std::string_view device, const WritePermission& permission, const std::string& what);

// After opening, before the first write: throws deploy::RefusedError naming each signature found at
// LBA 0 or `start_lba` (deploy/safety.h scan_device) and --force, unless permission.force.
void check_no_signatures(const model::BlockIo& io, uint64_t start_lba, const WritePermission& permission);

}  // namespace gpunvme::guard
