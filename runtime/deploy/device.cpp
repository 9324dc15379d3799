#include "runtime/deploy/device.h"

#include <algorithm>

#include "host/error.h"
#include "host/open_device.h"
#include "runtime/io/cpu_block_io.h"

namespace gpunvme::deploy {

Device::Device(const std::string& device, uint32_t nsid) : name_(device), nsid_(nsid) {
  ctrl_ = host::open_controller(device);
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
