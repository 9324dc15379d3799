#include "runtime/deploy/device.h"

#include <algorithm>

#include "host/emulator/config.h"
#include "host/error.h"
#include "host/open_device.h"
#include "runtime/io/cpu_block_io.h"

namespace gpunvme::deploy {

Device::Device(const std::string& device, uint32_t nsid, host::Access access) : name_(device), nsid_(nsid) {
  const auto mode = access == host::Access::kReadOnly ? host::LockMode::kShared : host::LockMode::kExclusive;
  lock_ = host::DeviceLock::acquire(device, nsid, mode);
  ctrl_ = host::open_controller(device, {}, access);
  if (!lock_.held()) lock_ = host::DeviceLock::acquire(device, nsid, mode);  // an image the emulator just created
  if (emu::is_emu_device(device)) {
    const auto cfg = emu::parse_emu_device(device);
    discards_writes_ = nsid >= 1 && nsid <= cfg.namespaces.size() && cfg.namespaces[nsid - 1].backing == emu::Backing::kNull;
  }
  bool found = false;
  std::string have;
  for (const auto& ns : ctrl_->namespaces()) {
    found |= ns.nsid == nsid;
    have += (have.empty() ? "" : ", ") + std::to_string(ns.nsid);
  }
  if (!found) {
    throw Error(ErrorKind::kNotFound, device + " has no namespace " + std::to_string(nsid) +
                                          " (it has: " + (have.empty() ? "none" : have) + "); pass --nsid");
  }
  const uint32_t entries = std::min<uint32_t>(256, ctrl_->max_queue_entries());
  qp_ = ctrl_->create_io_queue_pair(1, entries);
  host::CpuIoOptions opts;
  opts.queue_depth = std::min<uint32_t>(64, entries - 1);
  cpu_ = std::make_unique<host::CpuIo>(*ctrl_, *qp_, nsid, opts);
  name_ = device + " namespace " + std::to_string(nsid);
  bio_ = model::cpu_block_io(*ctrl_, *cpu_, name_);
  if (access == host::Access::kReadOnly)
    bio_.write = [this](uint64_t, uint32_t, const void*) {
      throw Error(ErrorKind::kInvalidArgument, name_ + " was opened read-only");
    };
}

Device::~Device() {
  try {
    cpu_.reset();
    if (qp_) ctrl_->delete_io_queue_pair(*qp_);
    qp_.reset();
  } catch (...) {
    // The controller's destructor still shuts it down; nothing useful to report from a destructor.
  }
}

}  // namespace gpunvme::deploy
