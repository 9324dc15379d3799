#include "runtime/deploy/device.h"

#include <algorithm>
#include <span>
#include <string>
#include <utility>

#include "host/emulator/config.h"
#include "host/error.h"
#include "host/open_device.h"
#include "runtime/deploy/layout_check.h"
#include "runtime/deploy/safety.h"
#include "runtime/io/cpu_block_io.h"
#include "runtime/model/model_error.h"

namespace gpunvme::deploy {

namespace {

// How namespace `nsid` of an emu: device keeps its data (nullopt: not emu:, or no such namespace).
std::optional<emu::Backing> emu_backing(const std::string& device, uint32_t nsid) {
  if (!emu::is_emu_device(device)) return std::nullopt;
  const auto cfg = emu::parse_emu_device(device);
  if (nsid < 1 || nsid > cfg.namespaces.size()) return std::nullopt;
  return cfg.namespaces[nsid - 1].backing;
}

}  // namespace

Device::Device(const std::string& device, uint32_t nsid, host::Access access) : name_(device), nsid_(nsid) {
  const auto mode = access == host::Access::kReadOnly ? host::LockMode::kShared : host::LockMode::kExclusive;
  locked_ = host::open_locked(device, mode, access, {}, nsid);
  ctrl_ = locked_.ctrl.get();
  discards_writes_ = emu_backing(device, nsid) == emu::Backing::kNull;
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

Device::Device(std::vector<std::unique_ptr<Device>> members, const std::optional<Layout>& layout)
    : members_(std::move(members)) {
  nsid_ = members_.at(0)->nsid();
  // Copies of the members' BlockIos go only into stripe_, which this object destroys before members_.
  std::vector<model::BlockIo> ios;
  for (const auto& m : members_) {
    ios.push_back(m->block_io());
    discards_writes_ |= m->discards_writes();
  }
  stripe_ = layout ? std::make_unique<model::StripeSet>(std::move(ios), layout->geometry, layout->generation)
                   : std::make_unique<model::StripeSet>(std::move(ios));
  layout_pending_ = layout.has_value();
  retire_pending_ = layout && layout->replaces_other;
  if (layout) unit_text_ = layout->unit_text;
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

// Before a member opens (so no image is created for a refused set): it keeps its data past this
// process. A set is written by one process (deploy, llm_make_model) and read by others.
void check_keeps_data(const std::string& device, uint32_t nsid) {
  const auto backing = emu_backing(device, nsid);
  if (backing == emu::Backing::kNull)
    throw RefusedError(device + " stores nothing (emu:null): a striped set needs members that keep data; use image "
                       "files (emu:/path/m1.img,size=...) or real drives as members");
  if (backing == emu::Backing::kRam)
    throw RefusedError(device + " lives in this process's memory (emu:ram) and is gone when it exits: nothing could "
                       "ever read the set written onto it. Use image files (emu:/path/m1.img,size=...) or real drives "
                       "as members");
}

// What an opened member must pass before the set is laid over it (check_stripe_layout aside): unless
// `force`, it holds nothing of somebody else's at LBA 0 (its stripe record's place) or where the
// set's data starts.
void check_member(Device& m, uint64_t data_start_lba, bool force) {
  if (force) return;
  const auto found = scan_device(m.block_io(), data_start_lba);
  if (found.empty()) return;
  throw RefusedError("refusing to make " + m.name() + " a member of a striped set: found " + signature_list(found) +
                         ". If this device really holds nothing you need, add --force",
                     found);
}

// One block size for every member: a set's stripe unit, record and logical LBAs are in blocks.
void check_one_block_size(const std::vector<std::unique_ptr<Device>>& members) {
  for (const auto& m : members)
    if (m->lba_size() != members[0]->lba_size())
      throw RefusedError("the members of a striped set must share one block size: " + members[0]->name() + " has " +
                         std::to_string(members[0]->lba_size()) + "-byte blocks, " + m->name() + " " +
                         std::to_string(m->lba_size()) + "-byte blocks; give members formatted alike (emu: the same "
                         "lba=, a drive: `nvme format --lbaf`). Nothing was written");
}

// Every check of create_stripe, on opened members, writing nothing: the set's layout and its next
// generation. The BlockIo copies made here die with this call, before the members move on.
struct StripePlan {
  model::StripeGeometry geometry;
  model::StripeGeneration generation;
  bool replaces_other;
  std::string unit_text;
};

// A unit as --stripe-unit takes it: "128K", "1M".
std::string unit_arg(uint64_t bytes) {
  if (bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes % 1024 == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

// The unit a new layout gets (StripeUnit) and the words that say why. Without --stripe-unit, members
// that already form one set in this order keep its unit: a re-deploy of another model, or of the same
// one after the rule changed, replaces the model without re-laying the set (which check_stripe_layout
// would refuse without --force). Members that form no such set get the model's unit.
std::pair<uint64_t, std::string> choose_unit(std::span<const model::BlockIo> ios, const StripeUnit& unit) {
  if (unit.given) return {*unit.given, unit_arg(*unit.given) + " (--stripe-unit)"};
  const std::string model_unit = unit_arg(unit.model_default);
  uint64_t kept = 0;
  try {
    kept = model::read_member_records(ios).at(0).geometry.unit_bytes();
  } catch (const model::ModelError&) {  // not one set in this order: a new set
    return {unit.model_default, model_unit + " (the model's default)"};
  }
  if (kept == unit.model_default) return {kept, model_unit + " (the set's and the model's default)"};
  return {kept, unit_arg(kept) + " (the set's, kept; the model's default is " + model_unit + ": --stripe-unit " +
                    model_unit + " --force re-lays the set)"};
}

StripePlan plan_stripe(const std::vector<std::unique_ptr<Device>>& members, const StripeUnit& unit, bool force) {
  check_one_block_size(members);
  std::vector<model::BlockIo> ios;
  for (const auto& m : members) ios.push_back(m->block_io());
  const auto [unit_bytes, unit_text] = choose_unit(ios, unit);
  uint64_t smallest = UINT64_MAX;
  for (const auto& m : members) smallest = std::min(smallest, m->n_lbas());
  model::StripeGeometry g = model::make_stripe_geometry(uint32_t(members.size()), members[0]->lba_size(), smallest,
                                                        unit_bytes, model::random_stripe_id());
  for (const auto& m : members) check_member(*m, g.data_start_lba, force);
  // The set these members already form in this very layout keeps its id and moves on a generation.
  const auto same = check_stripe_layout(ios, g.unit_blocks, force);
  if (same) g.set_id = same->geometry.set_id;
  return {g, model::next_generation(same ? std::optional(same->generation) : std::nullopt), !same, unit_text};
}

}  // namespace

std::unique_ptr<Device> Device::create_stripe(const std::vector<std::string>& devices, const StripeUnit& unit, bool force,
                                              uint32_t nsid) {
  if (devices.size() < 2) throw Error(ErrorKind::kInvalidArgument, "a striped set needs 2 or more --device");
  for (const std::string& d : devices) check_keeps_data(d, nsid);
  std::vector<std::unique_ptr<Device>> members = open_members(devices, nsid, host::Access::kReadWrite);
  const StripePlan p = plan_stripe(members, unit, force);
  return std::unique_ptr<Device>(
      new Device(std::move(members), Layout{p.geometry, p.generation, p.replaces_other, p.unit_text}));
}

void Device::retire_previous_layout() {
  if (!retire_pending_) return;
  for (const auto& m : members_) {
    const std::vector<uint8_t> zero(m->lba_size(), 0);
    m->block_io().write(0, 1, zero.data());
  }
  for (const auto& m : members_) m->flush();
  retire_pending_ = false;
}

void Device::write_layout() {
  if (!layout_pending_) return;
  model::write_stripe_records(stripe_->member_ios(), stripe_->geometry(), stripe_->generation());
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
