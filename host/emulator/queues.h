// Controller-side queue state (internal to the emulator). Ring memory is translated once, at queue
// creation, to a host pointer; the I/O path never translates ring addresses per command.
// Each CQ, with every SQ that posts to it, is owned by exactly one controller thread, so the mutable
// fields below (heads, tails, phase, delayed CQEs) need no lock.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

#include "driver/commands.h"
#include "driver/memory_order.h"
#include "driver/queue_ring.h"

namespace gpunvme::emu {

struct DelayedCqe {
  std::chrono::steady_clock::time_point due;
  uint32_t dw0;
  uint16_t sqhd;
  uint16_t sqid;
  uint16_t cid;
  uint16_t status;  // Status::field (no phase)
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
  std::deque<DelayedCqe> delayed;  // fault-injected late completions, in due order per fault delay

  // Takes the host's CQ head doorbell. A value that is not inside the posted window is ignored
  // (spec: Invalid Doorbell Write Value, reported by an asynchronous event we do not raise).
  void refresh_head() {
    const uint32_t h = nvme::mmio_read32(head_db);
    if (h == prod.head || h >= entries) return;
    if (nvme::ring_used(prod.head, h, entries) <= nvme::ring_used(prod.head, prod.tail, entries)) prod.head = h;
  }
  // Slots that may still be posted, keeping room for completions already promised (delayed).
  uint32_t room() const {
    const uint32_t free = nvme::ring_free(prod.head, prod.tail, entries);
    return free > delayed.size() ? free - uint32_t(delayed.size()) : 0;
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
