#include "host/locked_open.h"

namespace gpunvme::host {

LockedController open_locked(std::string_view device, LockMode mode, Access access, const ControllerOptions& options,
                             uint32_t nsid) {
  LockedController c;
  c.lock = DeviceLock::acquire(device, nsid, mode);  // before the open: a busy device is not even brought up
  c.ctrl = open_controller(device, options, access);
  if (!c.lock.held()) c.lock = DeviceLock::acquire(device, nsid, mode);  // an image the emulator just created
  return c;
}

}  // namespace gpunvme::host
