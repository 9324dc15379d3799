// An I/O (or admin) queue pair in DMA memory: its rings, doorbells, phase and command-id tracking.
// The CPU path submits and polls through this class; the GPU path takes a QueueMemoryView of the
// same memory and drives it from a kernel while the host side leaves it alone.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "driver/commands.h"
#include "driver/queue_ring.h"
#include "driver/status.h"
#include "host/dma_memory.h"

namespace gpunvme::host {

// Raw memory of one queue pair, for code that drives it itself (GPU kernels, tests).
struct QueueMemoryView {
  uint16_t qid = 0;
  uint32_t entries = 0;              // SQ and CQ have the same number of entries
  nvme::SubmissionEntry* sq = nullptr;  // host views
  nvme::CompletionEntry* cq = nullptr;
  volatile uint32_t* sq_doorbell = nullptr;
  volatile uint32_t* cq_doorbell = nullptr;
  void* sq_device = nullptr;  // GPU views (nullptr unless the memory is GPU mapped)
  void* cq_device = nullptr;
  uint64_t sq_doorbell_offset = 0;  // byte offsets of the doorbells in BAR0, for a GPU mapping of BAR0
  uint64_t cq_doorbell_offset = 0;
};

struct Completion {
  uint16_t cid = 0;
  nvme::Status status{};
  uint32_t dw0 = 0;
  bool ok() const { return status.ok(); }
};

class QueuePair {
 public:
  // Allocates the rings (zeroed CQ so no stale phase tags) but does not create them on the controller.
  QueuePair(Transport& transport, uint16_t qid, uint32_t entries, uint32_t dstrd, const DmaOptions& memory);
  ~QueuePair();
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  uint16_t qid() const { return qid_; }
  uint32_t entries() const { return sq_.entries; }
  uint64_t sq_bus() const { return sq_mem_.bus(); }
  uint64_t cq_bus() const { return cq_mem_.bus(); }
  QueueMemoryView view() const;

  // Commands the caller may still submit before the ring or the id table is full.
  uint32_t free_slots() const;
  uint32_t in_flight() const { return in_flight_; }

  // Copies the entry into the next SQ slot with a fresh command id (returned). Does not ring the
  // doorbell: call ring_sq_doorbell() once per batch. Throws kResource when the queue is full.
  uint16_t enqueue(nvme::SubmissionEntry entry) {
    const uint16_t cid = take_cid();
    place(cid, entry);
    return cid;
  }
  // Two-step form for entries whose contents depend on their command id (per-id PRP lists):
  // take_cid() reserves an id and a slot (throws kResource when full), place() writes the entry,
  // release_cid() gives back an id that was never placed.
  uint16_t take_cid();
  void place(uint16_t cid, nvme::SubmissionEntry entry);
  void release_cid(uint16_t cid);
  void ring_sq_doorbell();
  uint16_t submit(const nvme::SubmissionEntry& entry) {
    const uint16_t cid = enqueue(entry);
    ring_sq_doorbell();
    return cid;
  }

  // Reaps up to `max` new completions into `out` and rings the CQ head doorbell if any were taken.
  // A completion naming a command id that is not in flight (duplicate, wrong CID) is a protocol
  // error: it is skipped and counted (protocol_errors()), never given to the caller.
  uint32_t poll(Completion* out, uint32_t max);
  uint64_t protocol_errors() const { return protocol_errors_; }
  const std::string& last_protocol_error() const { return last_protocol_error_; }

  // Waits for the completion of `cid`, with a bound; others that complete meanwhile are kept for
  // later wait() calls. Throws kTimeout naming the queue, command id and elapsed time, or
  // kProtocol when a completion for a command not in flight arrives meanwhile.
  Completion wait(uint16_t cid, std::chrono::milliseconds timeout);

  // Forgets every command in flight (after a controller reset or a timed-out command that will never
  // complete), so the ids can be reused.
  void abandon_in_flight();

  // After a controller reset, before the queue is created again at the same bus addresses: the
  // rings go back to their initial state (CQ zeroed so no stale phase tag reads as new, SQ tail and
  // head 0, CQ head 0 with phase 1, doorbell writes pending none) and every command id is free. The
  // commands that were in flight are forgotten; their owners resubmit them. Only while no one
  // submits to or polls this queue (CPU thread or GPU kernel).
  void reset_rings();
  // How many times reset_rings() ran: a user that keeps per-queue state (the GPU queue state, a
  // CpuIo's in-flight table) compares it to notice a reset it did not do itself.
  uint64_t generation() const { return generation_; }

  // Called about once a millisecond while wait() waits (the controller checks CSTS.CFS there),
  // so a dead controller ends a wait early with its own error instead of a timeout.
  void set_health_check(std::function<void()> check) { health_check_ = std::move(check); }
  // Called from the destructor (the controller forgets the queue so a reset does not recreate it).
  void set_on_destroy(std::function<void()> hook) { on_destroy_ = std::move(hook); }

 private:
  Transport& transport_;
  uint16_t qid_;
  DmaBuffer sq_mem_;
  DmaBuffer cq_mem_;
  volatile uint32_t* sq_db_;
  volatile uint32_t* cq_db_;
  uint64_t sq_db_off_;
  uint64_t cq_db_off_;
  nvme::SqRing sq_;
  nvme::CqRing cq_;
  // Command ids come from a free list, never a counter: an id is reused only after its completion.
  std::vector<uint16_t> free_cids_;
  std::vector<uint8_t> cid_busy_;
  std::vector<Completion> early_;  // completed but not yet claimed by wait()
  uint32_t in_flight_ = 0;
  uint32_t pending_doorbell_ = 0;
  void note_protocol_error(uint16_t cid);
  uint64_t generation_ = 0;
  uint64_t protocol_errors_ = 0;
  std::string last_protocol_error_;
  std::function<void()> health_check_;
  std::function<void()> on_destroy_;
};

}  // namespace gpunvme::host
