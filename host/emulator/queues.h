// Controller-side queue state (internal to the emulator). Ring memory is translated once, at queue
// creation, to a host pointer; the I/O path never translates ring addresses per command.
// Each CQ, with every SQ that posts to it, is owned by exactly one controller thread, so the mutable
// fields below (heads, tails, phase, delayed CQEs) need no lock.
#pragma once
#include <chrono>
#include <cstdint>
#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <vector>

#include "driver/commands.h"
#include "driver/memory_order.h"
#include "driver/queue_ring.h"

namespace gpunvme::emu {

// A completion the fault plan holds back: posted when due (delay), or never (drop: due is the end
// of time) unless the host aborts the command; then it is posted at once as Command Abort Requested.
struct DelayedCqe {
  std::chrono::steady_clock::time_point due;
  uint32_t dw0;
  uint16_t sqhd;
  uint16_t sqid;
  uint16_t cid;
  uint16_t status;  // Status::field (no phase)
};

// A completion held back by the drive model until `due` (steady_clock ns). `seq` keeps completions
// with equal due times in fetch order.
struct PacedCqe {
  int64_t due;
  uint64_t seq;
  uint32_t dw0;
  uint16_t sqhd;  // the SQ head when fetched; posted with the SQ's head at posting time when it still exists
  uint16_t sqid;
  uint16_t cid;
  uint16_t status;  // Status::field (no phase)
  // std::push_heap builds a max-heap: "less" here means "due later", so the earliest is on top.
  friend bool operator<(const PacedCqe& a, const PacedCqe& b) {
    return a.due != b.due ? a.due > b.due : a.seq > b.seq;
  }
};

struct CqState {
  uint16_t qid = 0;
  uint32_t entries = 0;
  nvme::CompletionEntry* ring = nullptr;  // host view of the ring
  uint64_t ring_iova = 0;
  volatile uint32_t* head_db = nullptr;
  nvme::CqProducer prod{};
  uint32_t sq_refs = 0;        // SQs posting here (admin thread only)
  unsigned owner = 0;          // controller thread index
  // Fault-held completions. The admin thread reaches them too (Abort marks one due), hence the lock;
  // `held` (their count, changed by the owner only) lets the owner skip the lock when there are none.
  std::mutex held_mu;
  std::deque<DelayedCqe> delayed;  // guarded by held_mu
  std::atomic<uint32_t> held{0};
  std::vector<PacedCqe> paced;     // drive-model completions not yet due: a heap, earliest on top
  uint64_t paced_seq = 0;

  // Takes the host's CQ head doorbell. A value that is not inside the posted window is ignored
  // (spec: Invalid Doorbell Write Value, reported by an asynchronous event we do not raise).
  void refresh_head() {
    const uint32_t h = nvme::mmio_read32(head_db);
    if (h == prod.head || h >= entries) return;
    if (nvme::ring_used(prod.head, h, entries) <= nvme::ring_used(prod.head, prod.tail, entries)) prod.head = h;
  }
  // Slots that may still be posted, keeping room for completions already promised (delayed, paced):
  // a command is fetched only when its CQE is sure to fit, as the CQ-full rule requires.
  uint32_t room() const {
    const uint32_t free = nvme::ring_free(prod.head, prod.tail, entries);
    const size_t promised = held.load(std::memory_order_relaxed) + paced.size();
    return free > promised ? free - uint32_t(promised) : 0;
  }
  void hold_fault(const DelayedCqe& c) {
    std::lock_guard<std::mutex> lock(held_mu);
    delayed.push_back(c);
    held.store(uint32_t(delayed.size()), std::memory_order_relaxed);
  }
  // Abort: the held completion of (sqid, cid), or with kEveryCid every one of sqid's, becomes due
  // now with `status`. False if none is held.
  static constexpr uint32_t kEveryCid = 0x10000;
  bool abort_held(uint16_t sqid, uint32_t cid, uint16_t status) {
    std::lock_guard<std::mutex> lock(held_mu);
    bool any = false;
    for (DelayedCqe& d : delayed) {
      if (d.sqid != sqid || (cid != kEveryCid && d.cid != cid)) continue;
      d.due = std::chrono::steady_clock::time_point::min();
      d.status = status;
      d.dw0 = 0;
      any = true;
      if (cid != kEveryCid) break;
    }
    return any;
  }
  void drop_held() {
    std::lock_guard<std::mutex> lock(held_mu);
    delayed.clear();
    held.store(0, std::memory_order_relaxed);
  }
  void hold(const PacedCqe& c) {
    paced.push_back(c);
    std::push_heap(paced.begin(), paced.end());
  }
  PacedCqe take_earliest() {
    std::pop_heap(paced.begin(), paced.end());
    const PacedCqe c = paced.back();
    paced.pop_back();
    return c;
  }
  // Writes one CQE: fields first, then (after the fence) the status half-word with the phase tag.
  void post(uint32_t dw0, uint16_t sqhd, uint16_t sqid, uint16_t cid, uint16_t status_field) {
    const auto slot = prod.post();
    nvme::CompletionEntry* e = ring + slot.index;
    e->dw0 = dw0;
    e->dw1 = 0;
    e->sqhd = sqhd;
    e->sqid = sqid;
    e->cid = cid;
    nvme::publish_cqe_fields_before_phase();
    *reinterpret_cast<volatile uint16_t*>(&e->status) = uint16_t((status_field << 1) | slot.phase);
  }
};

struct SqState {
  uint16_t qid = 0;
  uint32_t entries = 0;
  const nvme::SubmissionEntry* ring = nullptr;
  uint64_t ring_iova = 0;
  volatile uint32_t* tail_db = nullptr;
  uint32_t head = 0;
  CqState* cq = nullptr;
};

// What one controller thread serves: its CQs and the SQs that post to each. Immutable once published.
struct WorkList {
  struct Item {
    CqState* cq;
    std::vector<SqState*> sqs;
  };
  std::vector<Item> items;
};

}  // namespace gpunvme::emu
