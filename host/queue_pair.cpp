#include "host/queue_pair.h"

#include <cstring>
#include <string>
#include <thread>

#include "driver/memory_order.h"
#include "driver/registers.h"
#include "host/error.h"

namespace gpunvme::host {

QueuePair::QueuePair(Transport& transport, uint16_t qid, uint32_t entries, uint32_t dstrd, const DmaOptions& memory)
    : transport_(transport),
      qid_(qid),
      sq_mem_(transport, uint64_t(entries) * nvme::kSqeBytes, memory),
      cq_mem_(transport, uint64_t(entries) * nvme::kCqeBytes, memory) {
  if (entries < 2 || entries > 65536)
    throw Error(ErrorKind::kInvalidArgument, "queue " + std::to_string(qid) + ": " + std::to_string(entries) +
                                                 " entries requested; a queue has 2..65536 entries");
  // Rings are created physically contiguous (PC=1): under no IOMMU they must fit in one chunk.
  if (!sq_mem_.translation().is_contiguous() &&
      (sq_mem_.translation().contiguous_bytes_from(0, sq_mem_.size()) < sq_mem_.size() ||
       cq_mem_.translation().contiguous_bytes_from(0, cq_mem_.size()) < cq_mem_.size()))
    throw Error(ErrorKind::kResource, "queue " + std::to_string(qid) +
                                          ": ring memory is not bus-contiguous; use fewer entries or hugepages");
  sq_db_off_ = nvme::sq_tail_doorbell_offset(qid, dstrd);
  cq_db_off_ = nvme::cq_head_doorbell_offset(qid, dstrd);
  if (cq_db_off_ + 4 > transport.bar0_size())
    throw Error(ErrorKind::kInvalidArgument, "queue " + std::to_string(qid) + ": its doorbell at BAR0 offset " +
                                                 std::to_string(cq_db_off_) + " lies past the " +
                                                 std::to_string(transport.bar0_size()) + "-byte BAR0");
  sq_db_ = transport.bar0() + sq_db_off_ / 4;
  cq_db_ = transport.bar0() + cq_db_off_ / 4;
  sq_.entries = entries;
  cq_.entries = entries;
  // At most entries-1 commands fit in the SQ, so that many ids suffice.
  free_cids_.reserve(entries);
  for (uint32_t i = entries - 1; i-- > 0;) free_cids_.push_back(uint16_t(i));
  cid_busy_.assign(entries, 0);
}

QueuePair::~QueuePair() {
  if (on_destroy_) on_destroy_();
}

QueueMemoryView QueuePair::view() const {
  QueueMemoryView v;
  v.qid = qid_;
  v.entries = sq_.entries;
  v.sq = sq_mem_.as<nvme::SubmissionEntry>();
  v.cq = cq_mem_.as<nvme::CompletionEntry>();
  v.sq_doorbell = sq_db_;
  v.cq_doorbell = cq_db_;
  v.sq_device = sq_mem_.device();
  v.cq_device = cq_mem_.device();
  v.sq_doorbell_offset = sq_db_off_;
  v.cq_doorbell_offset = cq_db_off_;
  return v;
}

uint32_t QueuePair::free_slots() const {
  const uint32_t ring = sq_.free_slots();
  const uint32_t ids = uint32_t(free_cids_.size());
  return ring < ids ? ring : ids;
}

uint16_t QueuePair::take_cid() {
  if (sq_.full() || free_cids_.empty())
    throw Error(ErrorKind::kResource, "queue " + std::to_string(qid_) + " is full (" + std::to_string(in_flight_) +
                                          " commands in flight); poll completions before submitting more");
  const uint16_t cid = free_cids_.back();
  free_cids_.pop_back();
  cid_busy_[cid] = 1;
  return cid;
}

void QueuePair::release_cid(uint16_t cid) {
  cid_busy_[cid] = 0;
  free_cids_.push_back(cid);
}

void QueuePair::place(uint16_t cid, nvme::SubmissionEntry entry) {
  entry.cid = cid;
  const uint32_t slot = sq_.claim(1);
  sq_mem_.as<nvme::SubmissionEntry>()[slot] = entry;
  ++in_flight_;
  ++pending_doorbell_;
}

void QueuePair::ring_sq_doorbell() {
  if (pending_doorbell_ == 0) return;
  nvme::publish_entries_before_doorbell();
  nvme::mmio_write32(sq_db_, sq_.tail);
  pending_doorbell_ = 0;
}

uint32_t QueuePair::poll(Completion* out, uint32_t max) {
  volatile nvme::CompletionEntry* ring = cq_mem_.as<nvme::CompletionEntry>();
  uint32_t n = 0;
  uint32_t taken = 0;  // CQ slots consumed, the skipped ones included
  while (n < max) {
    volatile nvme::CompletionEntry& e = ring[cq_.head];
    const uint16_t status = e.status;
    if ((status & 1u) != cq_.phase) break;
    nvme::read_fields_after_phase();
    const uint16_t cid = e.cid;
    const uint16_t sqhd = e.sqhd;
    const uint32_t dw0 = e.dw0;
    if (cid >= cid_busy_.size() || !cid_busy_[cid]) [[unlikely]] {
      // Never complete a command with someone else's completion: count it, skip the slot, go on.
      note_protocol_error(cid);
      cq_.consume(1);
      ++taken;
      continue;
    }
    if (sqhd >= sq_.entries)
      throw Error(ErrorKind::kProtocol, "queue " + std::to_string(qid_) + ": completion reports SQ head " +
                                            std::to_string(sqhd) + " outside a " + std::to_string(sq_.entries) +
                                            "-entry queue");
    cid_busy_[cid] = 0;
    free_cids_.push_back(cid);
    --in_flight_;
    sq_.update_head(sqhd);
    out[n++] = Completion{cid, nvme::Status::from_cqe_status(status), dw0};
    cq_.consume(1);
    ++taken;
  }
  if (taken > 0) {
    nvme::release_slots_before_head_doorbell();
    nvme::mmio_write32(cq_db_, cq_.head);
  }
  return n;
}

void QueuePair::note_protocol_error(uint16_t cid) {
  ++protocol_errors_;
  last_protocol_error_ = "queue " + std::to_string(qid_) + ": the controller completed command id " +
                         std::to_string(cid) + " (CQ slot " + std::to_string(cq_.head) +
                         ") which is not in flight; the completion was ignored (the controller or its firmware "
                         "is misbehaving)";
}

Completion QueuePair::wait(uint16_t cid, std::chrono::milliseconds timeout) {
  for (size_t i = 0; i < early_.size(); ++i) {
    if (early_[i].cid == cid) {
      const Completion c = early_[i];
      early_.erase(early_.begin() + long(i));
      return c;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  auto next_health = start;
  uint32_t idle = 0;
  Completion batch[32];
  const uint64_t protocol_errors = protocol_errors_;
  for (;;) {
    const uint32_t n = poll(batch, 32);
    bool found = false;
    Completion mine{};
    for (uint32_t i = 0; i < n; ++i) {
      if (batch[i].cid == cid && !found) {
        mine = batch[i];
        found = true;
      } else {
        early_.push_back(batch[i]);
      }
    }
    if (found) return mine;
    // A synchronous caller learns of a stray completion at once (the others are kept in early_).
    if (protocol_errors_ != protocol_errors) throw Error(ErrorKind::kProtocol, last_protocol_error_);
    if (n == 0) {
      // Spin briefly for low latency, then yield so an emulated controller on the same cores can run.
      if (++idle > 256) std::this_thread::yield();
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_health) {
        if (health_check_) health_check_();
        next_health = now + std::chrono::milliseconds(1);
      }
      if (now - start > timeout)
        throw Error(ErrorKind::kTimeout,
                    "queue " + std::to_string(qid_) + ": command id " + std::to_string(cid) + " did not complete within " +
                        std::to_string(timeout.count()) + " ms (" + std::to_string(in_flight_) +
                        " commands in flight); the controller may have dropped it or hung");
    } else {
      idle = 0;
    }
  }
}

void QueuePair::abandon_in_flight() {
  for (uint32_t cid = 0; cid < cid_busy_.size(); ++cid) {
    if (cid_busy_[cid]) {
      cid_busy_[cid] = 0;
      free_cids_.push_back(uint16_t(cid));
    }
  }
  in_flight_ = 0;
  early_.clear();
}

void QueuePair::reset_rings() {
  abandon_in_flight();
  std::memset(cq_mem_.host(), 0, cq_mem_.size());
  sq_.tail = 0;
  sq_.head = 0;
  cq_.head = 0;
  cq_.phase = 1;
  pending_doorbell_ = 0;
  ++generation_;
}

}  // namespace gpunvme::host
