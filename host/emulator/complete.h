// Completion of one command with the fault plan applied (internal; shared by admin and I/O paths).
// Only reached when faults are armed or on the admin queue: the I/O fast path posts in batches.
#pragma once
#include <chrono>

#include "host/emulator/controller.h"

namespace gpunvme::emu {

template <class Exec>
bool EmulatedController::complete_with_faults(SqState& sq, CqState& cq, const nvme::SubmissionEntry& e,
                                              ThreadCounters& tc, Exec exec) {
  std::optional<Fault> f;
  if (faults_.commands_armed()) f = faults_.on_command(sq.qid, e.opcode);
  if (f && f->kind == FaultKind::kSurpriseRemoval) {
    remove_device();
    return false;
  }
  if (f && f->kind == FaultKind::kFatalOnCommand) {
    raise_fatal("injected fault: CSTS.CFS on SQ " + std::to_string(sq.qid) + " opcode " + std::to_string(e.opcode) +
                " cid " + std::to_string(e.cid));
    return false;
  }
  CommandResult r;
  if (f && f->kind == FaultKind::kErrorStatus) {
    r.status = nvme::Status::make(f->sct, f->sc, f->dnr).field;
  } else {
    r = exec(e);
  }
  tc.commands.store(tc.commands.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (r.status != 0) {
    tc.errors.store(tc.errors.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    log_error(sq.qid, e.cid, r.status, r.nsid, r.lba);
  }
  if (r.no_cqe) return true;
  uint16_t cid = e.cid;
  if (f) {
    switch (f->kind) {
      case FaultKind::kDropCompletion:
        // Held for good: its CQ slot stays reserved, and only an Abort or a reset lets it go.
        cq.hold_fault(DelayedCqe{std::chrono::steady_clock::time_point::max(), r.dw0, uint16_t(sq.head), sq.qid, cid,
                                 r.status});
        return true;
      case FaultKind::kWrongCid:
        cid = uint16_t(cid ^ f->cid_xor);
        break;
      case FaultKind::kDelayCompletion:
        cq.hold_fault(DelayedCqe{std::chrono::steady_clock::now() + f->delay, r.dw0, uint16_t(sq.head), sq.qid, cid,
                                 r.status});
        return true;
      default:
        break;
    }
  }
  cq.post(r.dw0, uint16_t(sq.head), sq.qid, cid, r.status);
  return true;
}

}  // namespace gpunvme::emu
