#include "runtime/deploy/device.h"

#include <algorithm>
#include <cstring>

#include "host/emulator/config.h"
#include "host/error.h"

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
  bounce_ = host::DmaBuffer(ctrl_->transport(), 4u << 20);

  name_ = device + " namespace " + std::to_string(nsid);
  bio_.lba_size = cpu_->lba_bytes();
  bio_.n_lbas = cpu_->blocks();
  bio_.name = name_;
  const uint64_t per = bounce_.size() / bio_.lba_size;
  bio_.read = [this, per](uint64_t lba, uint32_t count, void* dst) {
    auto* out = static_cast<uint8_t*>(dst);
    for (uint64_t done = 0; done < count;) {
      const uint64_t n = std::min<uint64_t>(per, count - done);
      cpu_->read(lba + done, n, bounce_, 0);
      std::memcpy(out + done * bio_.lba_size, bounce_.host(), n * bio_.lba_size);
      done += n;
    }
  };
  if (access == host::Access::kReadOnly) {
    bio_.write = [this](uint64_t, uint32_t, const void*) {
      throw Error(ErrorKind::kInvalidArgument, name_ + " was opened read-only");
    };
    return;
  }
  bio_.write = [this, per](uint64_t lba, uint32_t count, const void* src) {
    const auto* in = static_cast<const uint8_t*>(src);
    for (uint64_t done = 0; done < count;) {
      const uint64_t n = std::min<uint64_t>(per, count - done);
      std::memcpy(bounce_.host(), in + done * bio_.lba_size, n * bio_.lba_size);
      cpu_->write(lba + done, n, bounce_, 0);
      done += n;
    }
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
