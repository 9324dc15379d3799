#include "host/controller.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "driver/commands.h"
#include "driver/memory_order.h"
#include "driver/prp.h"
#include "host/error.h"
#include "host/format.h"

namespace gpunvme::host {

uint32_t Controller::read32(uint32_t off) const { return nvme::mmio_read32(transport_->bar0() + off / 4); }
void Controller::write32(uint32_t off, uint32_t v) { nvme::mmio_write32(transport_->bar0() + off / 4, v); }

Controller::Controller(std::unique_ptr<Transport> transport, const ControllerOptions& options)
    : transport_(std::move(transport)), options_(options) {
  if (!transport_) throw Error(ErrorKind::kInvalidArgument, "Controller needs a transport");
  if (transport_->bar0_size() < 0x1000 + 8)
    throw Error(ErrorKind::kInvalidArgument, transport_->name() + ": BAR0 is only " +
                                                 std::to_string(transport_->bar0_size()) +
                                                 " bytes; an NVMe controller's BAR0 holds registers and doorbells "
                                                 "from 0x1000 (is this really an NVMe function?)");
  cap_ = nvme::Cap{nvme::mmio_read64(transport_->bar0() + nvme::reg::kCap / 4)};
  vs_ = nvme::Vs{read32(nvme::reg::kVs)};
  if (cap_.raw == ~0ull)
    throw Error(ErrorKind::kControllerFatal, transport_->name() + ": CAP reads as all ones; the device is not responding");
  if (!cap_.nvm_command_set())
    throw Error(ErrorKind::kUnsupported, transport_->name() + ": controller does not support the NVM command set (CAP.CSS=" +
                                             hex(cap_.css()) + ")");
  // Memory page size: 4 KiB when the controller allows it (matches host pages and PRP math), else its minimum.
  const uint32_t mps = cap_.mpsmin();
  page_bytes_ = 1ull << (12 + mps);

  disable();

  const uint32_t admin_entries = std::clamp<uint32_t>(options_.admin_entries, 2,
                                                      std::min<uint32_t>(nvme::kAdminQueueMaxEntries, cap_.max_queue_entries()));
  admin_ = std::make_unique<QueuePair>(*transport_, 0, admin_entries, cap_.dstrd(), options_.memory);
  admin_->set_health_check([this] { check_fatal("an admin command"); });
  scratch_ = DmaBuffer(*transport_, 4096, options_.memory);

  program_admin_queue();
  enable();
  identify_all();
  negotiate_queues();
}

Controller::~Controller() {
  {
    // Queue pairs should die first (they unmap through our transport); if one does not, it must
    // not call back into a destroyed controller.
    std::lock_guard<std::mutex> lock(live_mu_);
    for (QueuePair* qp : live_) qp->set_on_destroy(nullptr);
    live_.clear();
  }
  try {
    shutdown();
  } catch (const std::exception& e) {
    if (options_.verbose) std::fprintf(stderr, "gpunvme: shutdown of %s: %s\n", transport_->name().c_str(), e.what());
  }
}

void Controller::wait_ready(bool ready, const char* transition) {
  // CAP.TO is the worst case the controller promises for RDY to follow EN, in 500 ms units.
  auto limit = std::chrono::milliseconds(std::max<uint32_t>(cap_.ready_timeout_ms(), 500));
  if (options_.ready_timeout_cap.count() > 0) limit = std::min(limit, options_.ready_timeout_cap);
  const auto start = std::chrono::steady_clock::now();
  uint32_t spins = 0;
  for (;;) {
    const nvme::Csts csts{read32(nvme::reg::kCsts)};
    if (csts.device_gone())
      throw Error(ErrorKind::kControllerFatal, transport_->name() + ": registers read as all ones while " + transition +
                                                   "; the device was removed or stopped responding");
    if (csts.rdy() == ready) return;
    if (ready && csts.cfs())
      throw Error(ErrorKind::kControllerFatal, transport_->name() + ": Controller Fatal Status set while " + transition +
                                                   " (CSTS=" + hex(csts.raw) +
                                                   "); check the queue configuration, then reset the controller");
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited > limit)
      throw Error(ErrorKind::kTimeout,
                  transport_->name() + ": timed out " + transition + ": CSTS.RDY stayed " + (ready ? "0" : "1") +
                      " for " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) +
                      " ms (CAP.TO allows " + std::to_string(cap_.ready_timeout_ms()) + " ms; CSTS=" + hex(csts.raw) + ")");
    if (++spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(spins > 1000 ? 1000 : 50));
  }
}

void Controller::disable() {
  const nvme::Cc cc{read32(nvme::reg::kCc)};
  const nvme::Csts csts{read32(nvme::reg::kCsts)};
  // A controller with EN=0 but RDY=1 is still finishing a reset: wait for it, as with a fresh disable.
  if (cc.en()) write32(nvme::reg::kCc, cc.with_en(false).raw);
  if (cc.en() || csts.rdy()) wait_ready(false, "disabling the controller (CC.EN=0)");
}

void Controller::program_admin_queue() {
  write32(nvme::reg::kAqa, nvme::Aqa::make(admin_->entries(), admin_->entries()).raw);
  nvme::mmio_write64(transport_->bar0() + nvme::reg::kAsq / 4, admin_->sq_bus());
  nvme::mmio_write64(transport_->bar0() + nvme::reg::kAcq / 4, admin_->cq_bus());
}

void Controller::enable() {
  const nvme::Cc cc = nvme::Cc{}
                          .with_css(nvme::cc::kCssNvm)
                          .with_mps(cap_.mpsmin())
                          .with_ams(nvme::cc::kAmsRoundRobin)
                          .with_shn(nvme::cc::kShnNone)
                          .with_iosqes(nvme::kIoSqesLog2)
                          .with_iocqes(nvme::kIoCqesLog2);
  write32(nvme::reg::kCc, cc.raw);
  write32(nvme::reg::kCc, cc.with_en(true).raw);
  wait_ready(true, "enabling the controller (CC.EN=1)");
  check_fatal("enabling the controller");
}

void Controller::check_fatal(const char* during) const {
  const nvme::Csts csts{read32(nvme::reg::kCsts)};
  if (csts.device_gone())
    throw Error(ErrorKind::kControllerFatal, transport_->name() + ": registers read as all ones during " +
                                                 std::string(during) + "; the device was removed or stopped responding");
  if (csts.cfs())
    throw Error(ErrorKind::kControllerFatal, transport_->name() + ": Controller Fatal Status (CSTS.CFS) set during " +
                                                 std::string(during) + " (CSTS=" + hex(csts.raw) +
                                                 "); the controller must be reset before further use");
}

Completion Controller::admin_raw(const nvme::SubmissionEntry& entry, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(admin_mu_);
  return admin_raw_locked(entry, timeout);
}

Completion Controller::admin_raw_locked(const nvme::SubmissionEntry& entry, std::chrono::milliseconds timeout) {
  if (failed_.load(std::memory_order_relaxed))
    throw Error(ErrorKind::kControllerFatal, transport_->name() + ": the controller is out of service (" + failed_why_ + ")");
  const uint16_t cid = admin_->submit(entry);
  try {
    return admin_->wait(cid, timeout);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kTimeout) admin_->abandon_in_flight();
    throw;
  }
}

Completion Controller::admin(const nvme::SubmissionEntry& entry, const char* what, std::chrono::milliseconds timeout) {
  const Completion c = admin_raw(entry, timeout);
  if (!c.ok())
    throw Error(ErrorKind::kCommandFailed,
                transport_->name() + ": " + what + " failed: " + nvme::describe(c.status), c.status);
  return c;
}

Completion Controller::admin(const nvme::SubmissionEntry& entry, const char* what) {
  return admin(entry, what, options_.admin_timeout);
}

void Controller::admin_locked(const nvme::SubmissionEntry& entry, const char* what) {
  const Completion c = admin_raw_locked(entry, options_.admin_timeout);
  if (!c.ok())
    throw Error(ErrorKind::kCommandFailed,
                transport_->name() + ": " + what + " failed: " + nvme::describe(c.status), c.status);
}

void Controller::identify_all() {
  admin(nvme::make_identify(nvme::cns::kController, 0, scratch_.bus(), 0), "Identify Controller");
  std::memcpy(&id_ctrl_, scratch_.host(), sizeof id_ctrl_);
  // SQES/CQES give required (3:0) and maximum (7:4) entry sizes as log2; we use 64 and 16 bytes.
  if ((id_ctrl_.sqes & 0xF) > nvme::kIoSqesLog2 || (id_ctrl_.sqes >> 4) < nvme::kIoSqesLog2 ||
      (id_ctrl_.cqes & 0xF) > nvme::kIoCqesLog2 || (id_ctrl_.cqes >> 4) < nvme::kIoCqesLog2)
    throw Error(ErrorKind::kUnsupported, transport_->name() + ": controller does not take 64-byte SQ / 16-byte CQ entries "
                                                              "(SQES=" + hex(id_ctrl_.sqes) + ", CQES=" + hex(id_ctrl_.cqes) + ")");

  std::vector<uint32_t> nsids;
  const Completion list = admin_raw(nvme::make_identify(nvme::cns::kActiveNamespaceList, 0, scratch_.bus(), 0),
                                    options_.admin_timeout);
  if (list.ok()) {
    const auto* ids = scratch_.as<const uint32_t>();
    for (uint32_t i = 0; i < 1024 && ids[i] != 0; ++i) nsids.push_back(ids[i]);
  } else {
    // NVMe 1.0 controllers lack CNS 02h: every NSID up to NN is then a candidate.
    for (uint32_t n = 1; n <= id_ctrl_.nn && n <= 1024; ++n) nsids.push_back(n);
  }
  for (uint32_t nsid : nsids) {
    admin(nvme::make_identify(nvme::cns::kNamespace, nsid, scratch_.bus(), 0), "Identify Namespace");
    nvme::IdentifyNamespace ns;
    std::memcpy(&ns, scratch_.host(), sizeof ns);
    if (ns.nsze == 0) continue;  // inactive
    NamespaceInfo info;
    info.nsid = nsid;
    info.blocks = ns.nsze;
    info.capacity = ns.ncap;
    info.lba_format = ns.formatted_lba_index();
    info.lba_bytes = uint32_t(ns.lba_bytes());
    if (info.lba_bytes < 512)
      throw Error(ErrorKind::kProtocol, transport_->name() + ": namespace " + std::to_string(nsid) +
                                            " reports an invalid LBA format (LBADS < 9)");
    namespaces_.push_back(info);
  }
}

void Controller::negotiate_queues() {
  // 0xFFFF (0's based) is reserved, so 65535 is the largest request.
  const uint32_t wanted = options_.io_queues_wanted ? std::min<uint32_t>(options_.io_queues_wanted, 65535) : 65535;
  io_queues_requested_ = wanted;
  const Completion c = admin(nvme::make_set_num_queues(uint16_t(wanted), uint16_t(wanted)),
                             "Set Features (Number of Queues)");
  const nvme::QueueGrant g = nvme::decode_num_queues(c.dw0);
  io_queues_granted_ = std::min({g.sq_count, g.cq_count, wanted});
  const uint64_t doorbell_room = transport_->bar0_size() > nvme::reg::kDoorbellBase
                                     ? (transport_->bar0_size() - nvme::reg::kDoorbellBase) / (2ull * cap_.doorbell_stride_bytes())
                                     : 0;
  if (doorbell_room == 0)
    throw Error(ErrorKind::kProtocol, transport_->name() + ": BAR0 has no room for doorbells");
  // The admin queue takes the first doorbell pair.
  io_queues_granted_ = uint32_t(std::min<uint64_t>(io_queues_granted_, doorbell_room - 1));
}

const NamespaceInfo& Controller::namespace_info(uint32_t nsid) const {
  for (const auto& n : namespaces_)
    if (n.nsid == nsid) return n;
  throw Error(ErrorKind::kNotFound, transport_->name() + ": namespace " + std::to_string(nsid) +
                                        " is not active (controller has " + std::to_string(namespaces_.size()) +
                                        " active namespaces)");
}

uint64_t Controller::max_transfer_bytes() const { return nvme::max_transfer_bytes(id_ctrl_.mdts, cap_.min_page_bytes()); }

uint32_t Controller::max_blocks_per_command(uint32_t nsid) const {
  return nvme::max_blocks_per_command(id_ctrl_.mdts, cap_.min_page_bytes(), namespace_info(nsid).lba_bytes);
}

std::unique_ptr<QueuePair> Controller::create_io_queue_pair(uint16_t qid, uint32_t entries, const DmaOptions& memory) {
  if (qid == 0 || qid > io_queues_granted_)
    throw Error(ErrorKind::kInvalidArgument, transport_->name() + ": I/O queue id " + std::to_string(qid) +
                                                 " is outside 1.." + std::to_string(io_queues_granted_) +
                                                 " (the number of queues the controller granted)");
  if (entries < 2 || entries > cap_.max_queue_entries())
    throw Error(ErrorKind::kInvalidArgument, transport_->name() + ": " + std::to_string(entries) +
                                                 " queue entries requested; this controller allows 2.." +
                                                 std::to_string(cap_.max_queue_entries()) + " (CAP.MQES+1)");
  auto qp = std::make_unique<QueuePair>(*transport_, qid, entries, cap_.dstrd(), memory);
  // Created and tracked under one hold of the admin lock, so a reset sees it either not yet
  // created or created and live.
  std::lock_guard<std::mutex> lock(admin_mu_);
  admin_locked(nvme::make_create_io_cq(qid, entries, qp->cq_bus()), "Create I/O Completion Queue");
  const Completion sq = admin_raw_locked(nvme::make_create_io_sq(qid, entries, qp->sq_bus(), qid), options_.admin_timeout);
  if (!sq.ok()) {
    admin_raw_locked(nvme::make_delete_io_cq(qid), options_.admin_timeout);
    throw Error(ErrorKind::kCommandFailed,
                transport_->name() + ": Create I/O Submission Queue " + std::to_string(qid) + " failed: " + nvme::describe(sq.status),
                sq.status);
  }
  qp->set_health_check([this] { check_fatal("an I/O command"); });
  track(*qp);
  return qp;
}

void Controller::delete_io_queue_pair(QueuePair& qp) {
  forget(&qp);
  qp.set_on_destroy(nullptr);
  // The SQ goes first: a CQ with an SQ still attached cannot be deleted (Invalid Queue Deletion).
  admin(nvme::make_delete_io_sq(qp.qid()), "Delete I/O Submission Queue");
  admin(nvme::make_delete_io_cq(qp.qid()), "Delete I/O Completion Queue");
  qp.abandon_in_flight();
}

void Controller::track(QueuePair& qp) {
  std::lock_guard<std::mutex> lock(live_mu_);
  live_.push_back(&qp);
  qp.set_on_destroy([this, p = &qp] { forget(p); });
}

void Controller::forget(QueuePair* qp) {
  std::lock_guard<std::mutex> lock(live_mu_);
  live_.erase(std::remove(live_.begin(), live_.end(), qp), live_.end());
}

// ---- Recovery ----

bool Controller::device_removed() const { return nvme::Csts{read32(nvme::reg::kCsts)}.device_gone(); }

void Controller::recreate_io_queue(QueuePair& qp) {
  qp.reset_rings();
  const uint16_t qid = qp.qid();
  admin_locked(nvme::make_create_io_cq(qid, qp.entries(), qp.cq_bus()), "Create I/O Completion Queue (after reset)");
  admin_locked(nvme::make_create_io_sq(qid, qp.entries(), qp.sq_bus(), qid), "Create I/O Submission Queue (after reset)");
}

void Controller::reset(const std::string& why) {
  std::lock_guard<std::mutex> lock(admin_mu_);
  const std::string what = transport_->name() + ": controller reset (" + why + ")";
  if (failed_.load(std::memory_order_relaxed))
    throw Error(ErrorKind::kControllerFatal, what + " refused: " + failed_why_);
  try {
    if (device_removed())
      throw Error(ErrorKind::kControllerFatal, "registers read as all ones; the device was removed or stopped responding");
    disable();
    admin_->reset_rings();
    program_admin_queue();
    enable();
    // The queue count returns to its default with the reset; ask for what we had.
    const Completion c = admin_raw_locked(nvme::make_set_num_queues(uint16_t(io_queues_requested_), uint16_t(io_queues_requested_)),
                                          options_.admin_timeout);
    if (!c.ok()) throw Error(ErrorKind::kCommandFailed, "Set Features (Number of Queues) failed: " + nvme::describe(c.status), c.status);
    const nvme::QueueGrant g = nvme::decode_num_queues(c.dw0);
    std::lock_guard<std::mutex> live_lock(live_mu_);
    for (QueuePair* qp : live_) {
      if (qp->qid() > g.sq_count || qp->qid() > g.cq_count)
        throw Error(ErrorKind::kProtocol, "the controller now grants " + std::to_string(std::min(g.sq_count, g.cq_count)) +
                                              " I/O queues, fewer than the live queue " + std::to_string(qp->qid()) + " needs");
      recreate_io_queue(*qp);
    }
  } catch (const Error& e) {
    failed_why_ = what + " failed: " + e.what();
    failed_.store(true, std::memory_order_relaxed);
    if (e.has_status()) throw Error(e.kind(), failed_why_, e.status());
    throw Error(e.kind(), failed_why_);
  }
  resets_.fetch_add(1, std::memory_order_relaxed);
}

void Controller::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  const nvme::Cc cc{read32(nvme::reg::kCc)};
  if (!cc.en()) return;
  const nvme::Csts now{read32(nvme::reg::kCsts)};
  if (now.device_gone()) return;
  if (failed_.load(std::memory_order_relaxed) || !now.rdy()) {
    // A controller that is not ready cannot shut down in order; disabling it is all that is left.
    write32(nvme::reg::kCc, cc.with_en(false).raw);
    return;
  }
  // Normal shutdown (section 3.6.1): CC.SHN=01b, then wait for CSTS.SHST=10b. Bounded by CAP.TO
  // (at least 5 s, Linux's default shutdown timeout for controllers that report no RTD3E).
  write32(nvme::reg::kCc, cc.with_shn(nvme::cc::kShnNormal).raw);
  const auto limit = std::chrono::milliseconds(std::max<uint32_t>(cap_.ready_timeout_ms(), 5000));
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const nvme::Csts csts{read32(nvme::reg::kCsts)};
    if (csts.device_gone()) return;
    if (csts.shst() == nvme::csts::kShstComplete) return;
    if (std::chrono::steady_clock::now() - start > limit)
      throw Error(ErrorKind::kTimeout, transport_->name() + ": shutdown did not complete within " +
                                           std::to_string(limit.count()) + " ms (CSTS=" + hex(csts.raw) + ")");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace gpunvme::host
