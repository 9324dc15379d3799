#include "runtime/deploy/device.h"

#include <algorithm>
#include <random>

#include "host/emulator/config.h"
#include "host/error.h"
#include "host/open_device.h"
#include "runtime/deploy/layout_check.h"
#include "runtime/deploy/safety.h"
#include "runtime/io/cpu_block_io.h"
#include "runtime/model/model_error.h"

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

Device::Device(std::vector<std::unique_ptr<Device>> members, const std::optional<model::StripeGeometry>& layout)
    : members_(std::move(members)) {
  nsid_ = members_.at(0)->nsid();
  std::vector<model::BlockIo> ios;
  for (const auto& m : members_) {
    ios.push_back(m->block_io());
    discards_writes_ |= m->discards_writes();
  }
  stripe_ = layout ? std::make_unique<model::StripeSet>(std::move(ios), *layout)
                   : std::make_unique<model::StripeSet>(std::move(ios));
  layout_pending_ = layout.has_value();
  bio_ = stripe_->logical();
  name_ = "striped set of " + std::to_string(members_.size()) + " (" + members_[0]->name();
  for (size_t i = 1; i < members_.size(); ++i) name_ += ", " + members_[i]->name();
  name_ += ")";
  bio_.name = name_;
}

namespace {

// A set's members, each opened (so locked) in host::lock_order and kept in the order given: two
// processes opening one set in different orders never each hold some members and miss the rest.
std::vector<std::unique_ptr<Device>> open_members(const std::vector<std::string>& devices, uint32_t nsid,
                                                  host::Access access) {
  std::vector<std::unique_ptr<Device>> members(devices.size());
  for (const size_t i : host::lock_order(devices, nsid)) members[i] = std::make_unique<Device>(devices[i], nsid, access);
  return members;
}

}  // namespace

std::unique_ptr<Device> Device::open(const std::vector<std::string>& devices, uint32_t nsid, host::Access access) {
  if (devices.empty()) throw Error(ErrorKind::kInvalidArgument, "no --device given");
  if (devices.size() == 1) return std::make_unique<Device>(devices[0], nsid, access);
  return std::unique_ptr<Device>(new Device(open_members(devices, nsid, access), std::nullopt));
}

namespace {

uint64_t random_set_id() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

// What a member must pass before the set is laid over it (check_stripe_layout aside): it keeps data,
// and unless `force` holds nothing of somebody else's at LBA 0 (its stripe record's place) or where
// the set's data starts.
void check_member(Device& m, uint64_t data_start_lba, bool force) {
  if (m.discards_writes())
    throw RefusedError(m.name() + " stores nothing (emu:null): a striped set needs members that keep data");
  if (force) return;
  const auto found = scan_device(m.block_io(), data_start_lba);
  if (found.empty()) return;
  std::string msg = "refusing to make " + m.name() + " a member of a striped set: found ";
  for (size_t i = 0; i < found.size(); ++i) msg += (i ? ", " : "") + found[i].what + " at LBA " + std::to_string(found[i].lba);
  throw RefusedError(msg + ". If this device really holds nothing you need, add --force", found);
}

}  // namespace

std::unique_ptr<Device> Device::create_stripe(const std::vector<std::string>& devices, uint64_t unit_bytes, bool force,
                                              uint32_t nsid) {
  if (devices.size() < 2) throw Error(ErrorKind::kInvalidArgument, "a striped set needs 2 or more --device");
  std::vector<std::unique_ptr<Device>> members = open_members(devices, nsid, host::Access::kReadWrite);
  std::vector<model::BlockIo> ios;
  uint64_t smallest = UINT64_MAX;
  for (const auto& m : members) {
    ios.push_back(m->block_io());
    smallest = std::min(smallest, m->n_lbas());
  }
  model::StripeGeometry g =
      model::make_stripe_geometry(uint32_t(devices.size()), members[0]->lba_size(), smallest, unit_bytes, random_set_id());
  for (const auto& m : members) check_member(*m, g.data_start_lba, force);
  // The set these members already form in this very layout keeps its id: a re-deploy changes no record.
  if (const auto same = check_stripe_layout(ios, g.unit_blocks, force)) g.set_id = same->set_id;
  return std::unique_ptr<Device>(new Device(std::move(members), g));
}

void Device::write_layout() {
  if (!layout_pending_) return;
  std::vector<model::BlockIo> ios;
  for (const auto& m : members_) ios.push_back(m->block_io());
  model::write_stripe_records(ios, stripe_->geometry());
  for (const auto& m : members_) m->flush();
  layout_pending_ = false;
}

host::Controller& Device::controller() {
  if (striped()) throw Error(ErrorKind::kInvalidArgument, name_ + " is a striped set: it has one controller per member");
  return *ctrl_;
}

host::CpuIo& Device::cpu() {
  if (striped()) throw Error(ErrorKind::kInvalidArgument, name_ + " is a striped set: it has one queue per member");
  return *cpu_;
}

void Device::read_blocks(uint64_t lba, uint64_t count, host::DmaBuffer& buf, uint64_t offset) {
  if (!striped()) return cpu_->read(lba, count, buf, offset);
  for (uint64_t done = 0; done < count;) {
    const uint32_t n = uint32_t(std::min<uint64_t>(count - done, UINT32_MAX / lba_size()));
    bio_.read(lba + done, n, buf.as<uint8_t>() + offset + done * lba_size());
    done += n;
  }
}

void Device::write_blocks(uint64_t lba, uint64_t count, const host::DmaBuffer& buf, uint64_t offset) {
  if (!striped()) return cpu_->write(lba, count, buf, offset);
  for (uint64_t done = 0; done < count;) {
    const uint32_t n = uint32_t(std::min<uint64_t>(count - done, UINT32_MAX / lba_size()));
    bio_.write(lba + done, n, buf.as<uint8_t>() + offset + done * lba_size());
    done += n;
  }
}

void Device::flush() {
  if (!striped()) return cpu_->flush();
  for (auto& m : members_) m->flush();
}

uint32_t Device::lba_size() const { return striped() ? bio_.lba_size : cpu_->lba_bytes(); }
uint64_t Device::n_lbas() const { return striped() ? bio_.n_lbas : cpu_->blocks(); }

Device::~Device() {
  if (striped()) return;  // the members close themselves (the set's BlockIo goes first: declared later)
  try {
    cpu_.reset();
    if (qp_) ctrl_->delete_io_queue_pair(*qp_);
    qp_.reset();
  } catch (...) {
    // The controller's destructor still shuts it down; nothing useful to report from a destructor.
  }
}

}  // namespace gpunvme::deploy
