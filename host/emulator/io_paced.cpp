// The I/O path under a drive model (drive_model.h): commands are fetched and executed as on the fast
// path (data moves at once), but each CQE is held on its CQ until the model's due time. The thread
// keeps serving its other queues meanwhile; held CQEs keep their CQ slots reserved (CqState::room),
// so posting one later never overruns the CQ, and posting goes through CqState::post, so the phase
// and ring order are those of every other completion.
#include <array>
#include <chrono>

#include "host/emulator/controller.h"

namespace gpunvme::emu {
namespace {

// Commands executed and admitted to the model per lock. Small, because completions fall due while a
// batch executes (a 4 KiB copy takes about a microsecond): the thread posts what is due after every
// batch, so a deep SQ does not make held CQEs late. A batch also ends after kBatchBytes (controller.h).
constexpr uint32_t kBatch = 16;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline void bump(std::atomic<uint64_t>& a, uint64_t n) {
  a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);  // single writer
}

}  // namespace

size_t EmulatedController::serve_sq_paced(const WorkList::Item& item, SqState& sq, IoContext& ctx) {
  CqState& cq = *item.cq;
  const uint32_t tail = nvme::mmio_read32(sq.tail_db);
  if (tail == sq.head || tail >= sq.entries) return 0;  // an out-of-range tail is ignored
  nvme::read_entries_after_doorbell();
  uint32_t todo = std::min(nvme::ring_used(sq.head, tail, sq.entries), cq.room());
  if (todo == 0) return 0;  // CQ full (or all of it promised): the commands wait in the SQ
  const size_t total = todo;
  size_t posted = 0;
  uint64_t errors = 0;
  std::array<DriveRequest, kBatch> reqs;
  std::array<DriveGrant, kBatch> grants;
  std::array<CommandResult, kBatch> results;
  std::array<uint16_t, kBatch> cids;
  // Arrival is when the tail was read: every command before it was in the SQ by then, so the
  // emulator's own copying overlaps the modeled service time instead of adding to it.
  const int64_t arrived = now_ns();
  while (todo > 0) {
    const uint32_t most = std::min(todo, kBatch);
    uint32_t n = 0;
    uint64_t moved = 0;
    while (n < most && moved < kBatchBytes) {
      const uint32_t i = n++;
      const nvme::SubmissionEntry e = sq.ring[sq.head];
      sq.head = nvme::ring_next(sq.head, sq.entries);
      results[i] = exec_io(e, sq.qid, ctx);
      cids[i] = e.cid;
      DriveRequest r{DriveOp::kOther, 0};
      const bool rw = e.opcode == nvme::nvm_op::kRead || e.opcode == nvme::nvm_op::kWrite;
      if (results[i].status == 0 && rw) {
        r.op = e.opcode == nvme::nvm_op::kRead ? DriveOp::kRead : DriveOp::kWrite;
        r.bytes = uint64_t(nvme::rw_nblocks(e)) << ns_fast_[e.nsid - 1].shift;  // exec_io validated NSID
        moved += r.bytes;
      }
      if (results[i].status != 0) {
        ++errors;
        log_error(sq.qid, e.cid, results[i].status, results[i].nsid, results[i].lba);
      }
      reqs[i] = r;
    }
    model_->admit(arrived, std::span(reqs.data(), n), std::span(grants.data(), n));
    for (uint32_t i = 0; i < n; ++i)
      cq.hold(PacedCqe{grants[i].due_ns, cq.paced_seq++, results[i].dw0, uint16_t(sq.head), sq.qid, cids[i],
                       results[i].status});
    todo -= n;
    if (!cq.paced.empty()) posted += flush_paced(item);
  }
  ThreadCounters& tc = *ctx.counters;
  bump(tc.commands, total);
  bump(queue_counters_[sq.qid].n, total);
  if (errors) bump(tc.errors, errors);
  return total + posted;
}

size_t EmulatedController::flush_paced(const WorkList::Item& item) {
  CqState& cq = *item.cq;
  const int64_t now = now_ns();
  size_t n = 0;
  // room() reserved a slot for every held CQE; the ring_free check only guards a host that moved the
  // CQ head backwards (refresh_head ignores that, but stay safe).
  while (!cq.paced.empty() && cq.paced.front().due <= now &&
         nvme::ring_free(cq.prod.head, cq.prod.tail, cq.entries) > 0) {
    const PacedCqe c = cq.take_earliest();
    // SQHD is the SQ's head now, as a real controller reports it: a held CQE must not report a head
    // older than one a CQE posted before it did, or the host would count SQ slots twice.
    uint16_t sqhd = c.sqhd;
    for (const SqState* sq : item.sqs)
      if (sq->qid == c.sqid) sqhd = uint16_t(sq->head);
    cq.post(c.dw0, sqhd, c.sqid, c.cid, c.status);
    ++n;
  }
  return n;
}

}  // namespace gpunvme::emu
