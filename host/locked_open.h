// Opening a device under its lock (host/device_lock.h): the one way every tool opens a device it
// reads or writes, so that no writer runs beside another writer or a reader (a deploy and
// `nvme_perf --fill`, `gpunvme demo`, layer_stream or an example writing the same image), and the
// refusal comes before the device opens, naming the holder's pid.
//   kExclusive: a tool that writes (deploy, llm_make_model, demo, nvme_perf writes and --fill,
//               layer_stream, the examples that write their model); refused while anyone holds it.
//   kShared:    a tool that only reads (ls, verify, the engine, nvme_perf reads, `read`); refused
//               while a writer holds it; readers share.
#pragma once
#include <memory>
#include <string_view>

#include "host/controller.h"
#include "host/device_lock.h"
#include "host/open_device.h"

namespace gpunvme::host {

struct LockedController {
  DeviceLock lock;  // declared first: released only after the controller below has shut down
  std::unique_ptr<Controller> ctrl;

  Controller* get() const { return ctrl.get(); }
  Controller* operator->() const { return ctrl.get(); }
  Controller& operator*() const { return *ctrl; }
  explicit operator bool() const { return ctrl != nullptr; }
};

// Locks namespace `nsid` of `device` in `mode` without waiting (DeviceBusyError naming the holders'
// pids), then opens it (`access`: kReadOnly opens emu: images read-only), then locks again when
// there was nothing to lock before: an emu: image that this open created.
LockedController open_locked(std::string_view device, LockMode mode, Access access, const ControllerOptions& options = {},
                             uint32_t nsid = 1);

// The mode and access of a tool that writes or only reads: kExclusive + kReadWrite, kShared + kReadOnly.
inline LockedController open_for(bool writes, std::string_view device, const ControllerOptions& options = {}) {
  return writes ? open_locked(device, LockMode::kExclusive, Access::kReadWrite, options)
                : open_locked(device, LockMode::kShared, Access::kReadOnly, options);
}

}  // namespace gpunvme::host
