// Admin command set (NVMe Base 2.0 section 5), executed by the admin thread under the DMA write lock.
#include <algorithm>
#include <cstring>

#include "driver/identify.h"
#include "host/emulator/complete.h"
#include "host/emulator/prp_dma.h"

namespace gpunvme::emu {
namespace {

using nvme::Status;
namespace sct = nvme::sct;
namespace sc = nvme::sc;

constexpr uint32_t kAerLimit = 4;  // Identify AERL = 3 (0's based)

uint16_t generic(uint8_t code) { return Status::make(sct::kGeneric, code, true).field; }
uint16_t specific(uint8_t code) { return Status::make(sct::kCommandSpecific, code, true).field; }

void put_ascii(char* dst, size_t n, const std::string& s) {
  std::memset(dst, ' ', n);
  std::memcpy(dst, s.data(), std::min(n, s.size()));
}
void put_le(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = uint8_t(v >> (8 * i));
}

}  // namespace

bool EmulatedController::serve_admin_queue() {
  CqState& cq = admin_cq_;
  SqState& sq = admin_sq_;
  ThreadCounters& tc = *counters_.back();
  cq.refresh_head();
  SqState* const admin_sqs[] = {&sq};
  bool did = cq.held.load(std::memory_order_relaxed) != 0 && flush_delayed(cq, admin_sqs) > 0;
  const uint32_t tail = nvme::mmio_read32(sq.tail_db);
  if (tail >= sq.entries || tail == sq.head) return did;  // an out-of-range tail is ignored
  nvme::read_entries_after_doorbell();
  while (sq.head != tail && cq.room() > 0) {
    const nvme::SubmissionEntry e = sq.ring[sq.head];
    sq.head = nvme::ring_next(sq.head, sq.entries);
    queue_counters_[0].n.store(queue_counters_[0].n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    did = true;
    if (!complete_with_faults(sq, cq, e, tc, [this](const nvme::SubmissionEntry& c) { return exec_admin(c); })) break;
  }
  return did;
}

EmulatedController::CommandResult EmulatedController::exec_admin(const nvme::SubmissionEntry& e) {
  // Admin commands use PRPs only (section 4.1.2) and are never fused.
  if (e.psdt() != 0 || e.fuse() != 0) return {generic(sc::kInvalidField)};
  switch (e.opcode) {
    case nvme::admin_op::kIdentify: return admin_identify(e);
    case nvme::admin_op::kCreateIoCq: return admin_create_cq(e);
    case nvme::admin_op::kCreateIoSq: return admin_create_sq(e);
    case nvme::admin_op::kDeleteIoCq: return admin_delete_cq(e);
    case nvme::admin_op::kDeleteIoSq: return admin_delete_sq(e);
    case nvme::admin_op::kGetFeatures: return admin_get_features(e);
    case nvme::admin_op::kSetFeatures: return admin_set_features(e);
    case nvme::admin_op::kGetLogPage: return admin_get_log_page(e);
    case nvme::admin_op::kAbort: return admin_abort(e);
    case nvme::admin_op::kAsyncEventRequest:
      // Held outstanding: we raise no events. They vanish at reset, like on a real controller.
      if (aer_outstanding_ >= kAerLimit) return {specific(sc::kAsyncEventLimitExceeded)};
      ++aer_outstanding_;
      return {0, 0, true};
    default:
      return {generic(sc::kInvalidOpcode)};
  }
}

// Commands run to completion as soon as they are fetched; only a completion the fault plan holds
// (dropped, delayed) belongs to a command still outstanding. Aborting that one posts its CQE with
// Command Abort Requested; anything else answers DW0 bit 0 = 1, "not aborted" (section 5.1).
EmulatedController::CommandResult EmulatedController::admin_abort(const nvme::SubmissionEntry& e) {
  const uint16_t sqid = uint16_t(e.cdw10 & 0xFFFF);
  const uint16_t cid = uint16_t(e.cdw10 >> 16);
  CqState* cq = nullptr;
  if (sqid == 0) cq = &admin_cq_;
  else if (sqid < sqs_.size() && sqs_[sqid]) cq = sqs_[sqid]->cq;
  const uint16_t aborted = Status::make(sct::kGeneric, sc::kAbortRequested, false).field;
  if (cq != nullptr && cq->abort_held(sqid, cid, aborted)) return {0, 0};
  return {0, 1};
}

EmulatedController::CommandResult EmulatedController::copy_to_host(const nvme::SubmissionEntry& e, const void* src,
                                                                   uint64_t len) {
  std::vector<iovec> iov;
  const uint8_t code = resolve_prps(dma_, e.prp1, e.prp2, len, page_bytes_, iov);
  if (code != sc::kSuccess) return {generic(code)};
  const char* p = static_cast<const char*>(src);
  for (const iovec& v : iov) {
    std::memcpy(v.iov_base, p, v.iov_len);
    p += v.iov_len;
  }
  return {};
}

EmulatedController::CommandResult EmulatedController::admin_identify(const nvme::SubmissionEntry& e) {
  const uint8_t cns = uint8_t(e.cdw10 & 0xFF);
  const uint32_t nn = namespace_count();
  switch (cns) {
    case nvme::cns::kController: {
      auto id = std::make_unique<nvme::IdentifyController>();
      std::memset(id.get(), 0, sizeof *id);
      id->vid = config_.vid;
      id->ssvid = config_.vid;
      put_ascii(id->sn, sizeof id->sn, config_.serial);
      put_ascii(id->mn, sizeof id->mn, "gpunvme emulated controller");
      put_ascii(id->fr, sizeof id->fr, "EMU 1.0");
      id->rab = 6;
      id->ieee[0] = 0x00; id->ieee[1] = 0x54; id->ieee[2] = 0x52;  // QEMU's OUI, like the VID
      id->mdts = config_.mdts;
      id->cntlid = 1;
      id->ver = vs_.raw;
      id->oacs = 0;         // no Format, Firmware, Namespace Management
      id->acl = 3;          // Abort Command Limit, 0's based
      id->aerl = uint8_t(kAerLimit - 1);
      id->frmw = 0x03;      // one slot, slot 1 read-only
      id->lpa = 0;          // SMART is controller-wide only
      id->elpe = 15;        // 16 Error Information entries, 0's based
      id->npss = 0;
      id->sqes = 0x66;
      id->cqes = 0x44;
      id->maxcmd = 0;
      id->nn = nn;
      id->oncs = nvme::oncs::kWriteZeroes;
      id->vwc = 0x01;       // a volatile write cache is present (Flush means something)
      id->sgls = 0;         // PRPs only
      const std::string nqn = "nqn.2024-01.io.gpunvme:emulated:" + config_.serial;
      std::memcpy(id->subnqn, nqn.data(), std::min(nqn.size(), sizeof id->subnqn - 1));
      put_le(id->psd[0].bytes, 2500, 2);  // PS0 max power 25.00 W
      return copy_to_host(e, id.get(), sizeof *id);
    }
    case nvme::cns::kNamespace: {
      if (e.nsid == 0 || (e.nsid > nn && e.nsid != 0xFFFFFFFFu)) return {generic(sc::kInvalidNamespaceOrFormat)};
      auto id = std::make_unique<nvme::IdentifyNamespace>();
      std::memset(id.get(), 0, sizeof *id);
      id->nlbaf = 1;  // two formats: 512 and 4096 bytes, no metadata
      id->lbaf[0] = nvme::LbaFormat::make(9, 0, 2);
      id->lbaf[1] = nvme::LbaFormat::make(12, 0, 0);
      if (e.nsid != 0xFFFFFFFFu) {  // FFFFFFFFh: the capabilities common to all namespaces
        const Namespace& ns = *namespaces_[e.nsid - 1];
        id->nsze = id->ncap = id->nuse = ns.blocks();
        id->flbas = ns.lba_bytes() == 4096 ? 1 : 0;
        id->nguid[0] = 0x67; id->nguid[1] = 0x70;  // "gp"
        put_le(id->nguid + 12, e.nsid, 4);
        id->eui64[0] = 0x00; id->eui64[1] = 0x54; id->eui64[2] = 0x52;
        put_le(id->eui64 + 4, e.nsid, 4);
      }
      return copy_to_host(e, id.get(), sizeof *id);
    }
    case nvme::cns::kActiveNamespaceList: {
      if (e.nsid >= 0xFFFFFFFEu) return {generic(sc::kInvalidNamespaceOrFormat)};
      auto list = std::make_unique<nvme::ActiveNamespaceList>();
      std::memset(list.get(), 0, sizeof *list);
      uint32_t n = 0;
      for (uint32_t id = e.nsid + 1; id <= nn && n < 1024; ++id) list->nsid[n++] = id;
      return copy_to_host(e, list.get(), sizeof *list);
    }
    default:
      return {generic(sc::kInvalidField)};
  }
}

// Create I/O Completion Queue (section 5.3). Before any Set Features Number of Queues the current
// allocation is the default, which we make the configured maximum (what Get Features reports).
EmulatedController::CommandResult EmulatedController::admin_create_cq(const nvme::SubmissionEntry& e) {
  const uint16_t qid = uint16_t(e.cdw10 & 0xFFFF);
  const uint32_t entries = (e.cdw10 >> 16) + 1;
  const bool pc = e.cdw11 & 1;
  const bool ien = (e.cdw11 >> 1) & 1;
  const uint16_t iv = uint16_t(e.cdw11 >> 16);
  if (qid == 0 || qid > (queues_allocated_ ? granted_cqs_ : config_.max_io_queues) || qid >= cqs_.size() || cqs_[qid]) return {specific(sc::kInvalidQueueIdentifier)};
  if (entries < 2 || entries > cap_.max_queue_entries()) return {specific(sc::kInvalidQueueSize)};
  if (!pc && cap_.contiguous_queues_required()) return {generic(sc::kInvalidField)};
  if (ien && iv != 0) return {specific(sc::kInvalidInterruptVector)};  // one (unused) vector: we poll
  if ((e.prp1 & (page_bytes_ - 1)) != 0) return {generic(sc::kPrpOffsetInvalid)};
  const uint64_t bytes = uint64_t(entries) * nvme::kCqeBytes;
  auto* ring = static_cast<nvme::CompletionEntry*>(dma_.translate(e.prp1, bytes));
  if (ring == nullptr) return {generic(sc::kDataTransferError)};
  auto cq = std::make_unique<CqState>();
  cq->qid = qid;
  cq->entries = entries;
  cq->ring = ring;
  cq->ring_iova = e.prp1;
  cq->head_db = cq_doorbell(qid);
  cq->prod = nvme::CqProducer{entries, 0, 1, 0};
  cq->owner = (qid - 1u) % config_.io_threads;
  nvme::mmio_write32(cq->head_db, 0);
  const unsigned owner = cq->owner;
  cqs_[qid] = std::move(cq);
  io_queue_created_ = true;
  publish_work(owner);
  return {};
}

// Create I/O Submission Queue (section 5.4).
EmulatedController::CommandResult EmulatedController::admin_create_sq(const nvme::SubmissionEntry& e) {
  const uint16_t qid = uint16_t(e.cdw10 & 0xFFFF);
  const uint32_t entries = (e.cdw10 >> 16) + 1;
  const bool pc = e.cdw11 & 1;
  const uint16_t cqid = uint16_t(e.cdw11 >> 16);
  if (qid == 0 || qid > (queues_allocated_ ? granted_sqs_ : config_.max_io_queues) || qid >= sqs_.size() || sqs_[qid]) return {specific(sc::kInvalidQueueIdentifier)};
  if (entries < 2 || entries > cap_.max_queue_entries()) return {specific(sc::kInvalidQueueSize)};
  if (cqid == 0 || cqid >= cqs_.size() || !cqs_[cqid]) return {specific(sc::kCompletionQueueInvalid)};
  if (!pc && cap_.contiguous_queues_required()) return {generic(sc::kInvalidField)};
  if ((e.prp1 & (page_bytes_ - 1)) != 0) return {generic(sc::kPrpOffsetInvalid)};
  const uint64_t bytes = uint64_t(entries) * nvme::kSqeBytes;
  auto* ring = static_cast<const nvme::SubmissionEntry*>(dma_.translate(e.prp1, bytes));
  if (ring == nullptr) return {generic(sc::kDataTransferError)};
  auto sq = std::make_unique<SqState>();
  sq->qid = qid;
  sq->entries = entries;
  sq->ring = ring;
  sq->ring_iova = e.prp1;
  sq->tail_db = sq_doorbell(qid);
  sq->cq = cqs_[cqid].get();
  nvme::mmio_write32(sq->tail_db, 0);
  ++sq->cq->sq_refs;
  const unsigned owner = sq->cq->owner;
  sqs_[qid] = std::move(sq);
  io_queue_created_ = true;
  publish_work(owner);
  return {};
}

// Delete I/O Submission Queue (section 5.7). The queue's thread stops serving it before we free it.
EmulatedController::CommandResult EmulatedController::admin_delete_sq(const nvme::SubmissionEntry& e) {
  const uint16_t qid = uint16_t(e.cdw10 & 0xFFFF);
  if (qid == 0 || qid >= sqs_.size() || !sqs_[qid]) return {specific(sc::kInvalidQueueIdentifier)};
  std::unique_ptr<SqState> sq = std::move(sqs_[qid]);
  // Its commands still outstanding (held by a fault) complete as aborted by the deletion.
  sq->cq->abort_held(qid, CqState::kEveryCid, Status::make(sct::kGeneric, sc::kAbortedSqDeletion, false).field);
  --sq->cq->sq_refs;
  publish_work(sq->cq->owner);  // waits until the owner's pass that could use `sq` has ended
  return {};
}

// Delete I/O Completion Queue (section 5.6): refused while an SQ still posts to it.
EmulatedController::CommandResult EmulatedController::admin_delete_cq(const nvme::SubmissionEntry& e) {
  const uint16_t qid = uint16_t(e.cdw10 & 0xFFFF);
  if (qid == 0 || qid >= cqs_.size() || !cqs_[qid]) return {specific(sc::kInvalidQueueIdentifier)};
  if (cqs_[qid]->sq_refs != 0) return {specific(sc::kInvalidQueueDeletion)};
  std::unique_ptr<CqState> cq = std::move(cqs_[qid]);
  publish_work(cq->owner);
  return {};
}

void EmulatedController::publish_work(unsigned thread) {
  auto* next = new WorkList{};
  for (size_t c = 1; c < cqs_.size(); ++c) {
    if (!cqs_[c] || cqs_[c]->owner != thread) continue;
    WorkList::Item item{cqs_[c].get(), {}};
    for (size_t s = 1; s < sqs_.size(); ++s)
      if (sqs_[s] && sqs_[s]->cq == cqs_[c].get()) item.sqs.push_back(sqs_[s].get());
    next->items.push_back(std::move(item));
  }
  WorkList* old = work_[thread].exchange(next, std::memory_order_seq_cst);
  qsbr_.synchronize();
  delete old;
}

// Get Features (section 5.15). SEL (CDW10 10:8): 0 current, 1 default, 2 saved (= default: nothing
// is saveable), 3 supported capabilities.
EmulatedController::CommandResult EmulatedController::admin_get_features(const nvme::SubmissionEntry& e) {
  const uint8_t fid = uint8_t(e.cdw10 & 0xFF);
  const uint32_t sel = (e.cdw10 >> 8) & 0x7;
  if (sel > 3) return {generic(sc::kInvalidField)};
  const bool current = sel == 0;
  switch (fid) {
    case nvme::feature::kArbitration:
      if (sel == 3) return {0, 0x4};  // changeable
      return {0, current ? arbitration_ : 0};
    case nvme::feature::kVolatileWriteCache:
      if (sel == 3) return {0, 0x4};
      return {0, current ? uint32_t(vwc_enabled_) : 1u};
    case nvme::feature::kNumberOfQueues: {
      if (sel == 3) return {0, 0x0};  // not saveable, not namespace specific, changeable once per reset
      const uint32_t nsq = current && queues_allocated_ ? granted_sqs_ : config_.max_io_queues;
      const uint32_t ncq = current && queues_allocated_ ? granted_cqs_ : config_.max_io_queues;
      return {0, ((ncq - 1) << 16) | (nsq - 1)};
    }
    default:
      return {generic(sc::kInvalidField)};
  }
}

// Set Features (section 5.27).
EmulatedController::CommandResult EmulatedController::admin_set_features(const nvme::SubmissionEntry& e) {
  const uint8_t fid = uint8_t(e.cdw10 & 0xFF);
  const bool save = e.cdw10 >> 31;
  if (save && (fid == nvme::feature::kArbitration || fid == nvme::feature::kVolatileWriteCache ||
               fid == nvme::feature::kNumberOfQueues))
    return {specific(sc::kFeatureNotSaveable)};
  switch (fid) {
    case nvme::feature::kArbitration:
      arbitration_ = e.cdw11;
      return {};
    case nvme::feature::kVolatileWriteCache:
      vwc_enabled_ = e.cdw11 & 1;
      for (auto& ns : namespaces_) ns->set_write_through(!vwc_enabled_);
      return {};
    case nvme::feature::kNumberOfQueues: {
      // Section 5.27.1.5: NSQR/NCQR are 0's based and 65535 is invalid; the allocation does not
      // change until the next Controller Level Reset, and once I/O queues exist the command fails
      // with Command Sequence Error.
      const uint32_t nsqr = e.cdw11 & 0xFFFF, ncqr = e.cdw11 >> 16;
      if (nsqr == 0xFFFF || ncqr == 0xFFFF) return {generic(sc::kInvalidField)};
      if (io_queue_created_) return {generic(sc::kCommandSequenceError)};
      if (!queues_allocated_) {
        granted_sqs_ = std::min(nsqr + 1, config_.max_io_queues);
        granted_cqs_ = std::min(ncqr + 1, config_.max_io_queues);
        queues_allocated_ = true;
      }
      return {0, ((granted_cqs_ - 1) << 16) | (granted_sqs_ - 1)};
    }
    default:
      return {generic(sc::kInvalidField)};
  }
}

// Get Log Page (section 5.16).
EmulatedController::CommandResult EmulatedController::admin_get_log_page(const nvme::SubmissionEntry& e) {
  const uint8_t lid = uint8_t(e.cdw10 & 0xFF);
  const uint64_t numd = ((uint64_t(e.cdw11 & 0xFFFF) << 16) | (e.cdw10 >> 16)) + 1;
  const uint64_t len = numd * 4;
  const uint64_t offset = (uint64_t(e.cdw13) << 32) | e.cdw12;
  if ((offset & 3) != 0) return {generic(sc::kInvalidField)};
  if (max_transfer_ != 0 && len > max_transfer_) return {generic(sc::kInvalidField)};
  std::vector<uint8_t> page;
  switch (lid) {
    case nvme::log_page::kErrorInformation: {
      page.assign(64 * 16, 0);
      std::lock_guard<std::mutex> lock(error_mu_);
      for (size_t i = 0; i < error_log_.size(); ++i) {
        uint8_t* p = page.data() + 64 * i;
        const ErrorEntry& x = error_log_[i];
        put_le(p + 0, x.count, 8);
        put_le(p + 8, x.sqid, 2);
        put_le(p + 10, x.cid, 2);
        put_le(p + 12, uint32_t(x.status) << 1, 2);
        put_le(p + 14, 0xFFFF, 2);  // parameter error location: not reported
        put_le(p + 16, x.lba, 8);
        put_le(p + 24, x.nsid, 4);
      }
      break;
    }
    case nvme::log_page::kSmartHealth: {
      if (e.nsid != 0 && e.nsid != 0xFFFFFFFFu) return {generic(sc::kInvalidField)};  // LPA bit 0 is 0
      page.assign(512, 0);
      const Stats s = stats();
      const auto units = [](uint64_t bytes) { return (bytes / 512 + 999) / 1000; };  // 1000 x 512 bytes, rounded up
      page[0] = 0;                 // critical warning
      put_le(&page[1], 308, 2);    // composite temperature, kelvin (35 C)
      page[3] = 100;               // available spare %
      page[4] = 10;                // spare threshold %
      page[5] = 0;                 // percentage used
      put_le(&page[32], units(s.bytes_read), 8);
      put_le(&page[48], units(s.bytes_written), 8);
      put_le(&page[64], s.reads, 8);
      put_le(&page[80], s.writes, 8);
      put_le(&page[112], 1, 8);    // power cycles
      {
        std::lock_guard<std::mutex> lock(error_mu_);
        put_le(&page[176], error_count_, 8);
      }
      break;
    }
    case nvme::log_page::kFirmwareSlot: {
      page.assign(512, 0);
      page[0] = 0x01;  // AFI: slot 1 active
      std::memcpy(&page[8], "EMU 1.0 ", 8);
      break;
    }
    default:
      return {specific(sc::kInvalidLogPage)};
  }
  if (offset >= page.size()) return {generic(sc::kInvalidField)};
  std::vector<uint8_t> out(len, 0);
  std::memcpy(out.data(), page.data() + offset, std::min<uint64_t>(len, page.size() - offset));
  return copy_to_host(e, out.data(), len);
}

}  // namespace gpunvme::emu
