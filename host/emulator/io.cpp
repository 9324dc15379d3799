// The I/O path: controller threads serving I/O queues, and the NVM command set (NVM Command Set 1.0
// section 3). Lean by design: per SQ one doorbell read, a batch of entries, CQE fields for the whole
// batch, one fence, then the phase-carrying status words; no lock, allocation or ring translation per
// command. Faults, when armed, divert to a per-command path.
#include <sys/prctl.h>

#include <algorithm>
#include <thread>

#include "host/emulator/complete.h"
#include "host/emulator/prp_dma.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GPUNVME_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define GPUNVME_CPU_RELAX() asm volatile("yield")
#else
#define GPUNVME_CPU_RELAX() ((void)0)
#endif

namespace gpunvme::emu {
namespace {

using nvme::Status;
namespace sc = nvme::sc;

constexpr uint16_t status_field(uint8_t code) { return Status::make(nvme::sct::kGeneric, code, true).field; }
constexpr uint16_t kMediaWriteFault = Status::make(nvme::sct::kMediaError, sc::kWriteFault, false).field;
constexpr uint16_t kMediaReadError = Status::make(nvme::sct::kMediaError, sc::kUnrecoveredReadError, false).field;

inline void bump(std::atomic<uint64_t>& a, uint64_t n) {
  // Single writer (the owning thread): a plain load/store pair, no locked instruction.
  a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

constexpr uint32_t kBatch = 64;
constexpr unsigned kSpinPasses = 256;  // idle passes before the first sleep
constexpr std::chrono::microseconds kWakeMargin{20};  // paced: stop sleeping this long before a due time

}  // namespace

void EmulatedController::io_thread_main(unsigned index) {
  const int slot = qsbr_.register_thread();
  IoContext ctx;
  ctx.index = index;
  ctx.counters = counters_[index].get();
  ctx.iov.reserve(1024);
  unsigned idle = 0;
  auto sleep = std::chrono::microseconds(1);
  const bool spin = config_.poll == PollPolicy::kSpin;
  // Paced completions are due at µs granularity; Linux's default 50 µs timer slack would make every
  // sleep overshoot them.
  if (model_) ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  while (!stop_.load(std::memory_order_relaxed)) {
    qsbr_.enter(slot);
    ctx.next_due_ns = INT64_MAX;
    size_t did = 0;
    if (!fatal_.load(std::memory_order_seq_cst) && !halted_.load(std::memory_order_relaxed)) {
      const WorkList* work = work_[index].load(std::memory_order_seq_cst);
      for (const WorkList::Item& item : work->items) did += serve_cq(item, ctx);
    }
    qsbr_.leave(slot);
    if (did != 0) {
      idle = 0;
      sleep = std::chrono::microseconds(1);
      continue;
    }
    if (spin || ++idle < kSpinPasses) {
      GPUNVME_CPU_RELAX();
      continue;
    }
    auto nap = sleep;
    if (ctx.next_due_ns != INT64_MAX) {
      // A held completion falls due: never sleep past it. Waking takes time too (tens of µs on a busy
      // machine), so the last stretch before a due time is spent yielding instead of sleeping.
      const auto now = std::chrono::steady_clock::now().time_since_epoch();
      const auto left = std::chrono::nanoseconds(ctx.next_due_ns) - now - kWakeMargin;
      if (left <= std::chrono::nanoseconds(0)) {
        std::this_thread::yield();
        continue;
      }
      nap = std::min(nap, std::chrono::duration_cast<std::chrono::microseconds>(left));
      if (nap.count() == 0) {
        std::this_thread::yield();
        continue;
      }
    }
    std::this_thread::sleep_for(nap);
    sleep = std::min(sleep * 2, config_.max_idle_sleep);
  }
  qsbr_.unregister_thread(slot);
}

size_t EmulatedController::serve_cq(const WorkList::Item& item, IoContext& ctx) {
  CqState& cq = *item.cq;
  cq.refresh_head();
  size_t did = cq.held.load(std::memory_order_relaxed) == 0 ? 0 : flush_delayed(cq, item.sqs);
  if (!cq.paced.empty()) did += flush_paced(item);
  const bool faulty = faults_.commands_armed();
  if (model_ && !faulty) {
    for (SqState* sq : item.sqs) did += serve_sq_paced(item, *sq, ctx);
  } else {
    for (SqState* sq : item.sqs) did += faulty ? serve_sq_faulty(*sq, cq, ctx) : serve_sq(*sq, cq, ctx);
  }
  if (!cq.paced.empty()) ctx.next_due_ns = std::min(ctx.next_due_ns, cq.paced.front().due);
  return did;
}

size_t EmulatedController::flush_delayed(CqState& cq, std::span<SqState* const> sqs) {
  const auto now = std::chrono::steady_clock::now();
  size_t n = 0;
  std::lock_guard<std::mutex> lock(cq.held_mu);
  for (auto it = cq.delayed.begin(); it != cq.delayed.end();) {
    // room() already reserves a slot for every delayed entry, so posting one never overruns.
    if (it->due <= now && nvme::ring_free(cq.prod.head, cq.prod.tail, cq.entries) > 0) {
      // SQHD is the SQ head now, not when the command was fetched: an old value would move the
      // host's view of the head backwards and shrink its free SQ slots.
      uint16_t sqhd = it->sqhd;
      for (const SqState* sq : sqs)
        if (sq->qid == it->sqid) sqhd = uint16_t(sq->head);
      cq.post(it->dw0, sqhd, it->sqid, it->cid, it->status);
      it = cq.delayed.erase(it);
      cq.held.store(uint32_t(cq.delayed.size()), std::memory_order_relaxed);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

size_t EmulatedController::serve_sq(SqState& sq, CqState& cq, IoContext& ctx) {
  const uint32_t tail = nvme::mmio_read32(sq.tail_db);
  uint32_t head = sq.head;
  const uint32_t entries = sq.entries;
  if (tail == head || tail >= entries) return 0;  // an out-of-range tail is ignored
  nvme::read_entries_after_doorbell();
  uint32_t todo = std::min(nvme::ring_used(head, tail, entries), cq.room());
  if (todo == 0) return 0;  // CQ full: hold the commands until the host frees slots
  const size_t total = todo;
  const nvme::SubmissionEntry* const ring = sq.ring;
  nvme::CompletionEntry* const cring = cq.ring;
  const uint32_t centries = cq.entries;
  const uint16_t sqid = sq.qid;
  const NsFast* const fast = ns_fast_.data();
  const uint32_t nns = uint32_t(ns_fast_.size());
  uint64_t reads = 0, writes = 0, bytes_read = 0, bytes_written = 0, errors = 0;
  uint16_t status[kBatch];
  while (todo > 0) {
    const uint32_t most = std::min(todo, kBatch);
    const uint32_t first = cq.prod.tail;
    uint32_t ci = first;
    uint32_t n = 0;
    uint64_t moved = 0;  // bytes copied (a null namespace moves none): the batch ends at kBatchBytes
    while (n < most && moved < kBatchBytes) {
      const uint32_t i = n++;
      const nvme::SubmissionEntry& e = ring[head];
      head = nvme::ring_next(head, entries);
      uint32_t dw0 = 0;
      uint16_t st;
      const uint8_t op = e.opcode;
      const uint32_t nsx = e.nsid - 1u;
      // Fast path: a plain Read/Write on a null namespace is all validation, no data.
      if ((op == nvme::nvm_op::kRead || op == nvme::nvm_op::kWrite) && e.flags == 0 && nsx < nns && fast[nsx].null) {
        const NsFast& ns = fast[nsx];
        const uint64_t slba = nvme::rw_slba(e);
        const uint32_t nlb = nvme::rw_nblocks(e);
        const uint64_t bytes = uint64_t(nlb) << ns.shift;
        if (slba >= ns.blocks || nlb > ns.blocks - slba) {
          st = status_field(sc::kLbaOutOfRange);
        } else if (max_transfer_ != 0 && bytes > max_transfer_) {
          st = status_field(sc::kInvalidField);
        } else {
          st = 0;
          if (op == nvme::nvm_op::kRead) {
            ++reads;
            bytes_read += bytes;
          } else {
            ++writes;
            bytes_written += bytes;
          }
        }
        if (st != 0) log_error(sqid, e.cid, st, e.nsid, slba);
      } else {
        const CommandResult r = exec_io(e, sqid, ctx);
        st = r.status;
        dw0 = r.dw0;
        if (st != 0) log_error(sqid, e.cid, st, r.nsid, r.lba);
        else if (op == nvme::nvm_op::kRead || op == nvme::nvm_op::kWrite) moved += uint64_t(nvme::rw_nblocks(e)) << fast[nsx].shift;
      }
      errors += st != 0;
      status[i] = st;
      nvme::CompletionEntry* c = cring + ci;
      c->dw0 = dw0;
      c->dw1 = 0;
      c->sqid = sqid;
      c->cid = e.cid;
      ci = nvme::ring_next(ci, centries);
    }
    // The whole batch is fetched before any CQE is visible: SQHD reports the batch's end in all.
    const uint16_t sqhd = uint16_t(head);
    for (uint32_t i = 0, cj = first; i < n; ++i, cj = nvme::ring_next(cj, centries)) cring[cj].sqhd = sqhd;
    // Every field of the batch's CQEs, then (one fence) the status words that carry the phase.
    nvme::publish_cqe_fields_before_phase();
    uint32_t phase = cq.prod.phase;
    ci = first;
    for (uint32_t i = 0; i < n; ++i) {
      *reinterpret_cast<volatile uint16_t*>(&cring[ci].status) = uint16_t((status[i] << 1) | phase);
      ci = nvme::ring_next(ci, centries);
      if (ci == 0) phase ^= 1u;
    }
    cq.prod.tail = ci;
    cq.prod.phase = phase;
    todo -= n;
  }
  sq.head = head;
  ThreadCounters& tc = *ctx.counters;
  bump(tc.commands, total);
  bump(queue_counters_[sqid].n, total);
  if (reads) {
    bump(tc.reads, reads);
    bump(tc.bytes_read, bytes_read);
  }
  if (writes) {
    bump(tc.writes, writes);
    bump(tc.bytes_written, bytes_written);
  }
  if (errors) bump(tc.errors, errors);
  return total;
}

// One command at a time, through the fault plan.
size_t EmulatedController::serve_sq_faulty(SqState& sq, CqState& cq, IoContext& ctx) {
  const uint32_t tail = nvme::mmio_read32(sq.tail_db);
  if (tail == sq.head || tail >= sq.entries) return 0;
  nvme::read_entries_after_doorbell();
  size_t done = 0;
  while (sq.head != tail && cq.room() > 0) {
    const nvme::SubmissionEntry e = sq.ring[sq.head];
    sq.head = nvme::ring_next(sq.head, sq.entries);
    ++done;
    bump(queue_counters_[sq.qid].n, 1);
    if (!complete_with_faults(sq, cq, e, *ctx.counters,
                              [&](const nvme::SubmissionEntry& c) { return exec_io(c, sq.qid, ctx); }))
      break;
  }
  return done;
}

EmulatedController::CommandResult EmulatedController::exec_io(const nvme::SubmissionEntry& e, uint16_t /*sqid*/,
                                                              IoContext& ctx) {
  // PSDT != 0 asks for SGLs, which Identify SGLS says we lack; fused operations are not supported.
  if (e.flags != 0) return {status_field(sc::kInvalidField), 0, false, e.nsid};
  const uint8_t op = e.opcode;
  if (op == nvme::nvm_op::kRead || op == nvme::nvm_op::kWrite || op == nvme::nvm_op::kWriteZeroes) {
    if (e.nsid - 1u >= namespaces_.size()) return {status_field(sc::kInvalidNamespaceOrFormat), 0, false, e.nsid};
    Namespace& ns = *namespaces_[e.nsid - 1];
    const uint64_t slba = nvme::rw_slba(e);
    const uint32_t nlb = nvme::rw_nblocks(e);
    if (slba >= ns.blocks() || nlb > ns.blocks() - slba)
      return {status_field(sc::kLbaOutOfRange), 0, false, e.nsid, slba};
    const uint64_t bytes = uint64_t(nlb) << ns.lba_shift();
    const uint64_t off = slba << ns.lba_shift();
    if (op != nvme::nvm_op::kRead && ns.write_protected())
      return {status_field(sc::kNamespaceWriteProtected), 0, false, e.nsid, slba};
    ThreadCounters& tc = *ctx.counters;
    if (op == nvme::nvm_op::kWriteZeroes) {  // no data transfer, so MDTS does not apply
      if (!ns.write_zeroes(off, bytes)) return {kMediaWriteFault, 0, false, e.nsid, slba};
      bump(tc.write_zeroes, 1);
      return {};
    }
    if (max_transfer_ != 0 && bytes > max_transfer_) return {status_field(sc::kInvalidField), 0, false, e.nsid, slba};
    const bool read = op == nvme::nvm_op::kRead;
    // A null namespace moves no data and does not look at the PRPs: it exists to measure command rate.
    if (!ns.is_null()) {
      const uint8_t code =
          resolve_prps(dma_, e.prp1, e.prp2, bytes, page_bytes_io_.load(std::memory_order_relaxed), ctx.iov);
      if (code != sc::kSuccess) return {status_field(code), 0, false, e.nsid, slba};
      const bool ok = read ? ns.read(off, ctx.iov.data(), int(ctx.iov.size()))
                           : ns.write(off, ctx.iov.data(), int(ctx.iov.size()));
      if (!ok) return {read ? kMediaReadError : kMediaWriteFault, 0, false, e.nsid, slba};
    }
    if (read) {
      bump(tc.reads, 1);
      bump(tc.bytes_read, bytes);
    } else {
      bump(tc.writes, 1);
      bump(tc.bytes_written, bytes);
    }
    return {};
  }
  if (op == nvme::nvm_op::kFlush) {
    // NSID FFFFFFFFh flushes every namespace (section 7.1 of the NVM Command Set).
    if (e.nsid == 0xFFFFFFFFu) {
      for (auto& ns : namespaces_)
        if (!ns->flush()) return {kMediaWriteFault, 0, false, e.nsid};
    } else {
      if (e.nsid - 1u >= namespaces_.size()) return {status_field(sc::kInvalidNamespaceOrFormat), 0, false, e.nsid};
      if (!namespaces_[e.nsid - 1]->flush()) return {kMediaWriteFault, 0, false, e.nsid};
    }
    bump(ctx.counters->flushes, 1);
    return {};
  }
  return {status_field(sc::kInvalidOpcode), 0, false, e.nsid};
}

}  // namespace gpunvme::emu
