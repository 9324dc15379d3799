// A namespace opened through our own driver for the deploy/verify/ls commands: the controller, one
// I/O queue pair, CpuIo, and a model::BlockIo view (runtime/io/cpu_block_io.h, bounce-buffered) for
// the model/ code. Bulk transfers go straight through CpuIo on caller-owned DmaBuffers (see alloc()).
// Opened for writing it holds the device's exclusive lock, for reading a shared one
// (host/device_lock.h) for its whole life; reading opens emu: images read-only.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "host/controller.h"
#include "host/cpu_io.h"
#include "host/device_lock.h"
#include "host/dma_memory.h"
#include "host/locked_open.h"
#include "host/open_device.h"
#include "runtime/model/block_io.h"
#include "runtime/model/stripe.h"

namespace gpunvme::deploy {

// A new striped set's unit: `given` (--stripe-unit), else the unit of the set the members already form
// in this order (a re-deploy never re-lays a set unasked), else `model_default`
// (model::default_stripe_unit of the model about to be written).
struct StripeUnit {
  std::optional<uint64_t> given;
  uint64_t model_default = model::kDefaultStripeUnitBytes;
};

class Device {
 public:
  // `device`: emu:... or vfio:BDF (host/open_device.h). Throws gpunvme::Error when the controller
  // does not come up or the namespace does not exist (naming the namespaces that do), and
  // host::DeviceBusyError when another process writes it (or, for kReadWrite, reads it).
  explicit Device(const std::string& device, uint32_t nsid = 1, host::Access access = host::Access::kReadWrite);
  // One device string: that namespace. Several: the striped set they form (model/stripe.h), opened
  // as one namespace (its logical volume); throws model::ModelError when they are not one set in order.
  static std::unique_ptr<Device> open(const std::vector<std::string>& devices, uint32_t nsid = 1,
                                      host::Access access = host::Access::kReadWrite);
  // Lays a striped set out over `devices` in this order and opens its logical volume, writing
  // nothing: every check runs first, on every member, and the members' stripe records are written
  // only by write_layout(), which deploy calls once its own checks on the logical volume have passed.
  // Refuses, naming the member: members of different block sizes (both named, with their sizes), a
  // member that keeps nothing (emu:null) or nothing past this process (emu:ram); and (RefusedError),
  // unless `force`, members holding something not ours (a signature, non-zero bytes) at LBA 0 or where
  // the set's data starts, as deploy does; a member with a model of its own, or members of a set laid
  // otherwise (another order, unit or membership: layout_check.h). The set they already form in this
  // layout keeps its id; every call gives the set a new generation (model/stripe.h), so the members
  // written by this deploy never open together with one saved before it. The unit: StripeUnit above.
  static std::unique_ptr<Device> create_stripe(const std::vector<std::string>& devices, const StripeUnit& unit,
                                               bool force, uint32_t nsid = 1);
  // A set from create_stripe laid over members that did not form it in this layout (another set or
  // order or unit, a model of their own, anything with --force): zeroes every member's LBA 0 (the
  // records of what they held), then flushes, so that nothing they held opens any more, before the
  // first byte of the new set lands where the old layout kept something else. A no-op otherwise
  // (a re-deploy onto the same layout: its own in-progress record takes the old one's place).
  void retire_previous_layout();
  // A set from create_stripe: writes every member's stripe record (the new generation), then flushes
  // them; a no-op for anything else and once done. Until then the members hold what they held.
  void write_layout();
  bool layout_pending() const { return layout_pending_; }
  // A set from create_stripe: its stripe unit and where it came from, for the tools' summary
  // ("128K (the model's default)"); "" for anything else.
  const std::string& stripe_unit_text() const { return unit_text_; }
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const std::string& name() const { return name_; }
  uint32_t nsid() const { return nsid_; }
  uint32_t lba_size() const;
  uint64_t n_lbas() const;
  uint64_t capacity_bytes() const { return n_lbas() * lba_size(); }

  // A striped set: its members (each a single namespace), the set; nullptr / empty for one namespace.
  bool striped() const { return stripe_ != nullptr; }
  const model::StripeSet* stripe() const { return stripe_.get(); }
  // One namespace only (a striped set has one controller per member): throws for a set.
  host::Controller& controller();
  host::CpuIo& cpu();
  // Whole blocks between `buf` (from alloc(), from `offset`) and the namespace or the set's logical
  // volume: zero-copy DMA for one namespace, through the members' bounce buffers for a set.
  void read_blocks(uint64_t lba, uint64_t count, host::DmaBuffer& buf, uint64_t offset);
  void write_blocks(uint64_t lba, uint64_t count, const host::DmaBuffer& buf, uint64_t offset);
  // Whole-block reads/writes through a 4 MiB bounce buffer; `name` is "emu:... namespace N".
  const model::BlockIo& block_io() const { return bio_; }
  // A DMA buffer of `bytes` for bulk transfers with cpu().
  // A striped set: member 0's (read_blocks / write_blocks copy through the members' bounce buffers).
  host::DmaBuffer alloc(uint64_t bytes) {
    return striped() ? members_[0]->alloc(bytes) : host::DmaBuffer(ctrl_->transport(), bytes);
  }
  void flush();
  // emu:null: every write is thrown away (deploy refuses it).
  bool discards_writes() const { return discards_writes_; }

 private:
  struct Layout {
    model::StripeGeometry geometry;
    model::StripeGeneration generation;
    bool replaces_other = false;  // the members did not form this set in this layout
    std::string unit_text;        // stripe_unit_text()
  };
  // A striped set over opened members: as their records say, or as `layout` lays it out (not written yet).
  Device(std::vector<std::unique_ptr<Device>> members, const std::optional<Layout>& layout);
  // The members own the controllers every BlockIo of theirs reaches (its queue, its bounce buffer's
  // DMA mapping): declared before stripe_ (which keeps copies of those BlockIos) and bio_, so they
  // are destroyed after both. No other copy of a member's BlockIo outlives a call.
  std::vector<std::unique_ptr<Device>> members_;
  std::unique_ptr<model::StripeSet> stripe_;
  std::string name_;
  uint32_t nsid_;
  bool discards_writes_ = false;
  bool layout_pending_ = false;
  bool retire_pending_ = false;
  std::string unit_text_;
  host::LockedController locked_;  // the device's lock, taken before the controller opened, released after it closed
  host::Controller* ctrl_ = nullptr;
  std::unique_ptr<host::QueuePair> qp_;
  std::unique_ptr<host::CpuIo> cpu_;
  model::BlockIo bio_;
};

}  // namespace gpunvme::deploy
