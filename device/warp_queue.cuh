// GPU-initiated NVMe I/O, the C++ device API: a warp drives one DeviceQueue (see device_queue.h for
// the ownership model). Header-only so that engines' .cu files inline it; needs nvcc, sm_70 or newer.
//
// One pass of warp_pump(), one function per phase (fault_free_passes() loops over 1-5; the rare work,
// 2a and 4-6, runs outside that loop):
//   1. reap_pass: every lane loads the status word of up to kPollRounds CQ slots past the head and checks
//      its phase tag; a ballot finds the run of new entries; read_fields_after_phase(); the lanes read
//      SQHD and CID, check each id is in flight exactly once (atomicExch on its busy word), hand the
//      status to the caller and free the ids. An error status the retry policy allows is not handed
//      over: its id stays reserved for the re-issue (warp_recovery.cuh schedule_retry).
//   2. submit_pass (2a. retry_pass, between passes while retries are pending, warp_recovery.cuh): up to
//      kSubmitRounds * 32 commands, one SQE per lane per round written with four 16-byte stores;
//      command ids come round-robin from the busy table (an id still in flight is never reused); the
//      slots are claimed and filled as the retry pass does it (warp_claim.cuh).
//   3. ring_doorbells: one system-scope fence, then the SQ tail and CQ head doorbells (lane 0).
//   4. the quiesce word (loaded at the top of the pass, used here): park for a controller reset.
//   5. timed_out: no progress for `timeout_ns` on %globaltimer ends the pass with fault::kTimedOut.
//   6. answer_oldest, only when the host asks (a stalled queue): the command it would abort.
// What recovery added to a fault-free pass: a load of the set's quiesce word at most every
// kControlPollNs (device memory, issued before the CQ loads; loaded every pass it cost one warp 5-8 % of
// its command rate at 1-4 queues) and a compare; a compare of the pending-retry
// count; one 8-byte store per command (its index, for a re-issue); lane 0's progress store to the
// health word at most every kHealthPeriodNs. The host's request for the oldest in-flight command
// rides in the quiesce word's load (one 64-bit load and compare per pass for both).
// A run ending with a sticky fault hands its unfinished commands to done() as failed
// (warp_recovery.cuh fail_unfinished); `done` must accept them (the commands may still be on the
// controller until the host rebuilds the queue: do not reuse their buffers before the ticket ends).
#pragma once
#include <cstddef>
#include <cstdint>

#include "device/device_queue.h"
#include "device/warp_claim.cuh"
#include "device/warp_recovery.cuh"
#include "device/warp_state.cuh"
#include "driver/commands.h"
#include "driver/memory_order.h"
#include "driver/queue_ring.h"
#include "driver/status.h"

namespace gpunvme::device {

// What one reap pass did: CQ entries consumed (for the head doorbell) and commands finished
// (success or a final error; a retried completion consumes an entry but finishes nothing).
struct Reaped {
  uint32_t consumed = 0;
  uint32_t finished = 0;
};

// Phase 1: reaps the run of new CQEs past the head (up to kPollRounds * 32), checks every id is in
// flight exactly once, hands each final status to done(tag, status).
template <class Done>
__device__ __forceinline__ Reaped reap_pass(const PumpContext& c, WarpState& s, Done& done) {
  const uint32_t lane = lane_id();
  uint32_t reaped = 0;
  if (s.in_flight == 0) return {};
  const uint32_t window = s.in_flight;
  uint32_t ok_mask[kPollRounds];
#pragma unroll
  for (uint32_t r = 0; r < kPollRounds; ++r) {
    const uint32_t ahead = r * 32 + lane;
    bool ok = false;
    if (r * 32 < window && ahead < window)
      ok = cqe_phase(load_cqe_cid_status(c.cq + s.cq.slot(ahead))) == s.cq.expected_phase(ahead);
    ok_mask[r] = __ballot_sync(kFullMask, ok);
  }
#pragma unroll
  for (uint32_t r = 0; r < kPollRounds; ++r) {
    if (ok_mask[r] != kFullMask) {
      reaped += __ffs(~ok_mask[r]) - 1;
      break;
    }
    reaped += 32;
  }
  if (reaped == 0) return {};
  nvme::read_fields_after_phase();
  // All field loads of the pass first (one round trip), then the checks.
  uint2 f[kPollRounds];
#pragma unroll
  for (uint32_t r = 0; r < kPollRounds; ++r) {
    const uint32_t ahead = r * 32 + lane;
    f[r] = make_uint2(0, 0);
    if (ahead < reaped) f[r] = load_cqe_tail(c.cq + s.cq.slot(ahead));
  }
  // Every id must be in flight exactly once: clearing its busy word with an exchange catches an id
  // that is not in flight (free, or waiting for a retry) and a duplicate, in whatever order they come.
  uint32_t was[kPollRounds];
#pragma unroll
  for (uint32_t r = 0; r < kPollRounds; ++r) {
    const uint32_t ahead = r * 32 + lane;
    const uint32_t cid = cqe_cid(f[r].y);
    was[r] = (ahead < reaped && cid <= c.cid_mask) ? atomicExch(&c.busy[cid], cid_state::kFree) : cid_state::kFree;
  }
  uint32_t my_sqhd = 0;
  uint32_t bad = 0, good = 0, errs = 0, retried = 0;
  uint64_t retry_due = ~0ull;
  bool any_error = false;  // warp-uniform: a fault-free pass skips the retry bookkeeping below
  const uint32_t last = reaped - 1;
#pragma unroll
  for (uint32_t r = 0; r < kPollRounds; ++r) {
    if (r * 32 < reaped) {
      const uint32_t ahead = r * 32 + lane;
      const bool active = ahead < reaped;
      const bool valid = active && was[r] == cid_state::kInFlight;
      const uint32_t cid = cqe_cid(f[r].y);
      const nvme::Status st = cqe_status(f[r].y);
      if (r == last / 32) my_sqhd = cqe_sqhd(f[r]);
      bad += active && !valid;
      const uint32_t err_mask = __ballot_sync(kFullMask, valid && !st.ok());
      bool retry = false;
      if (err_mask != 0) {  // the error path (warp-uniform): the retry policy decides per command
        any_error = true;
        const RoundErrors e =
            reap_errors(c, valid && !st.ok(), cid, st, s.failed == 0 && s.first_error_status == 0);
        retry = e.retry;
        retry_due = e.due < retry_due ? e.due : retry_due;
        if (e.first) {
          s.first_error_status = e.first_status;
          s.first_error_cid = e.first_cid;
          s.first_error_tag = e.first_tag;
        }
      }
      retried += retry;
      if (valid && !retry) {
        ++good;
        errs += !st.ok();
        done(c.tags[cid], st);
      }
    }
  }
  const uint32_t sqhd = __shfl_sync(kFullMask, my_sqhd, last & 31);
  const uint32_t nbad = __reduce_add_sync(kFullMask, bad);
  const uint32_t ngood = __reduce_add_sync(kFullMask, good);
  const uint32_t nerr = __reduce_add_sync(kFullMask, errs);
  if (nbad) {
    s.faults |= fault::kWrongCid;
    s.protocol_errors += nbad;
  }
  if (sqhd >= c.entries) s.faults |= fault::kBadSqHead; else s.sq.update_head(sqhd);
  s.cq.consume(reaped);
  s.in_flight -= reaped;
  s.completed += ngood;
  s.failed += nerr;
  const uint32_t nretry = any_error ? __reduce_add_sync(kFullMask, retried) : 0u;
  if (nretry) {
    const uint64_t due = warp_min64(retry_due);
    s.retry_due = s.retry_pending == 0 || due < s.retry_due ? due : s.retry_due;
    s.retry_pending += nretry;
    s.retries += nretry;
  }
  return {reaped, ngood};
}

// Phase 2: writes up to kSubmitRounds * 32 of the remaining commands (make(i, cid, &tag)) into the
// SQ, within the depth (in flight plus retries pending) and the ring's room. Returns the commands
// written (the caller rings).
template <class Make>
__device__ __forceinline__ uint32_t submit_pass(const PumpContext& c, WarpState& s, uint64_t count, uint64_t& issued,
                                                Make& make) {
  const uint32_t lane = lane_id();
  // The depth counts commands waiting for a retry too (the CPU path's RecoveringQueue::outstanding()):
  // a failed command keeps its place, so at depth 1 its re-issues come before any newer command.
  const uint32_t outstanding = s.in_flight + s.retry_pending;
  if (s.faults != 0 || issued >= count || outstanding >= c.max_in_flight) return 0;
  uint32_t n = 0;
  const uint64_t want64 = count - issued;
  const uint32_t room = c.max_in_flight - outstanding;
  const uint32_t ring_room = s.sq.free_slots();
  uint32_t want = uint32_t(want64 < room ? want64 : room);
  if (ring_room < want) want = ring_room;
  if (want > kSubmitRounds * 32) want = kSubmitRounds * 32;
  // Ids come round-robin; one still in flight (a slow or lost command) is skipped, never reused.
  // Each candidate is examined once per pass (at most cid_count of them).
  const uint32_t base = s.next_cid;
  uint32_t bz[kSubmitRounds];
#pragma unroll
  for (uint32_t r = 0; r < kSubmitRounds; ++r) {
    const uint32_t k = r * 32 + lane;
    bz[r] = 1;
    if (r * 32 < want + 32 && k <= c.cid_mask) bz[r] = c.busy[(base + k) & c.cid_mask];
  }
  uint32_t next = base;
#pragma unroll
  for (uint32_t r = 0; r < kSubmitRounds; ++r) {
    if (n < want) {
      const uint32_t cid = (base + r * 32 + lane) & c.cid_mask;
      const SlotClaim k = claim_slots(bz[r] == 0, n, want);
      if (k.take) {
        write_claimed(c, s, cid, k.slot, issued + k.slot, make);
        c.cmd[cid] = issued + k.slot;  // for a re-issue (attempt bits 0: the first submission)
      }
      if (k.taken != 0) next = base + r * 32 + (31 - __clz(k.taken)) + 1;
      n += __popc(k.taken);
    }
  }
  if (n > 0) {
    s.sq.claim(n);
    s.next_cid = next & c.cid_mask;
    s.in_flight += n;
    s.submitted += n;
    issued += n;
  }
  return n;
}

// Phase 3: one fence, then the doorbells (lane 0).
__device__ __forceinline__ void ring_doorbells(const DeviceQueue* q, const WarpState& s, uint32_t submitted,
                                               uint32_t reaped) {
  if (submitted == 0 && reaped == 0) return;
  // Both doorbells follow one system-scope fence: it publishes the SQEs (and PRP lists) written
  // before, and it also orders the CQE reads before the CQ head doorbell hands the slots back.
  if (submitted > 0) nvme::publish_entries_before_doorbell();
  else nvme::release_slots_before_head_doorbell();
  if (lane_id() == 0) write_doorbells(q, submitted > 0, s.sq.tail, reaped > 0, s.cq.head);
}

// Phase 5: whether the run made no progress for longer than timeout_ns (uniform across lanes).
__device__ __forceinline__ bool timed_out(bool progressed, uint64_t now, uint64_t& last_progress, uint64_t timeout_ns) {
  if (progressed) {
    last_progress = now;
    return false;
  }
  return now - last_progress > timeout_ns;
}

// The claim's side of recovery: say the queue runs, wait out a reset in progress, take over a new
// generation, refuse a controller the host could not bring back. Before any submission.
__device__ __forceinline__ void join_recovery(const PumpContext& c, WarpState& s) {
  publish_state(c, health_state::kRunning, s.in_flight);  // before the quiesce load (fence inside)
  if (load_control32(&c.control->quiesce) != 0 && !wait_for_resume(c, s)) return;
  const uint32_t generation = load_control32(&c.control->generation);
  if (generation != s.generation) adopt_generation(c, s, generation);
  if (load_control32(&c.control->failed) != 0) s.faults |= fault::kControllerLost;
}

// Where a run stands between passes (uniform across lanes).
struct PumpProgress {
  uint64_t issued = 0;         // commands made and submitted at least once
  uint64_t finished = 0;       // commands handed to done()
  uint64_t last_progress = 0;  // %globaltimer of the last pass that submitted or reaped
  uint64_t published = 0;      // when lane 0 last stored progress to the health word
  uint64_t now = 0;            // %globaltimer at the end of the last pass
  uint64_t control_polled = 0; // when the control word was last loaded
};

// How often, at most, a running pass loads the set's control word (a reset's quiesce, the host's
// question): the host waits for parking in milliseconds, a pass takes about a microsecond.
inline constexpr uint64_t kControlPollNs = 4'000;

__device__ __forceinline__ bool run_complete(const WarpState& s, const PumpProgress& p, uint64_t count) {
  return p.finished >= count && s.in_flight == 0 && s.retry_pending == 0;
}

// Records a pass's progress for the watchdog; false (with kTimedOut) when none came for timeout_ns.
__device__ __forceinline__ bool note_progress(const PumpContext& c, WarpState& s, PumpProgress& p, bool progressed,
                                              uint64_t timeout_ns) {
  const uint64_t now = warp_now();
  p.now = now;
  if (progressed) publish_progress(c, s, now, p.published);
  if (!timed_out(progressed, now, p.last_progress, timeout_ns)) return true;
  s.faults |= fault::kTimedOut;
  return false;
}

// Phases 1-5, pass after pass, for as long as nothing needs recovery: returns the control word as the
// last pass saw it. It leaves on completion, a fault, a retry to schedule or a control-word change;
// the rare work (retry_pass, a reset, the host's question) runs outside this loop, so that none of
// its code (another inlined make() and done()) sits in the loop a fault-free run spins in: with it
// inside, the no-fault command rate was 3-12 % lower than without recovery.
template <class Make, class Done>
__device__ __forceinline__ uint64_t fault_free_passes(DeviceQueue* q, const PumpContext& c, WarpState& s,
                                                      PumpProgress& p, uint64_t count, uint64_t expected,
                                                      uint64_t timeout_ns, Make& make, Done& done) {
  for (;;) {
    // Loaded first, used (as lane 0 saw it) after the doorbells: its latency hides behind the CQ loads.
    // Not every pass: see kControlPollNs.
    const bool poll = c.control && p.now - p.control_polled >= kControlPollNs;
    const uint64_t control_seen = poll ? load_control_word(c.control) : expected;
    if (poll) p.control_polled = p.now;
    const Reaped r = reap_pass(c, s, done);
    p.finished += r.finished;
    const uint32_t n = submit_pass(c, s, count, p.issued, make);
    ring_doorbells(q, s, n, r.consumed);
    const uint64_t control = __shfl_sync(kFullMask, control_seen, 0);
    if (s.faults != 0 || run_complete(s, p, count) || control != expected) return control;
    if (!note_progress(c, s, p, n > 0 || r.consumed > 0, timeout_ns)) return control;
    if (s.retry_pending != 0) return control;
  }
}

// Drives `count` commands through queue `q` with the calling (full) warp and waits for all of them.
//   make(i, cid, &tag) -> nvme::SubmissionEntry   builds the warp's i-th command (0 <= i < count);
//                                                  the pump stores cid; tag comes back in done().
//                                                  Called again with the same i to re-issue it.
//   done(tag, status)                              called once per command, by the lane that reaped
//                                                  its completion: success, or the final error.
// depth caps the commands outstanding: in flight or waiting for a retry (besides the ring: entries - 1),
// as the CPU path's queue depth counts RecoveringQueue::outstanding(). Returns this run's report;
// the queue's state is written back, and the queue given up, before returning.
template <class Make, class Done>
__device__ QueueReport warp_pump(DeviceQueue* q, uint64_t count, uint32_t depth, uint64_t timeout_ns, Make make,
                                 Done done) {
  const uint32_t lane = lane_id();
  const int32_t who = int32_t(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32);
  QueueReport rep;
  rep.qid = q->qid;
  bool owned = false;
  if (lane == 0) owned = try_own(q, who);
  owned = __shfl_sync(kFullMask, owned, 0);
  if (!owned) {
    rep.faults = fault::kNotOwner;
    return rep;
  }
  WarpState s = load_state(q);
  const PumpContext c = pump_context(q, depth);
  if (c.control) join_recovery(c, s);
  const uint32_t faults0 = s.faults;
  PumpProgress p;
  // A queue with a sticky fault does nothing more until the host rebuilds it (resets the controller).
  const bool usable = s.faults == 0;
  const uint64_t t0 = warp_now();
  p.last_progress = t0;
  // The control word as a fault-free pass expects it: not quiescing, the host's last request for the
  // oldest command seen (requests made before this run are not this run's to answer).
  uint64_t expected = c.control ? uint64_t(load_control32(&c.control->oldest_request)) << 32 : 0u;
  while (usable && !run_complete(s, p, count)) {
    const uint64_t control = fault_free_passes(q, c, s, p, count, expected, timeout_ns, make, done);
    if (s.faults != 0 || run_complete(s, p, count)) break;
    if (control != expected) {  // a reset, or the host asks for the oldest command
      expected = control & ~uint64_t(0xFFFFFFFFu);
      if (uint32_t(control) == 0) {
        answer_oldest(c, s);
      } else {  // the host resets the controller: park, restart
        if (wait_for_resume(c, s)) {
          const uint32_t generation = load_control32(&c.control->generation);
          if (generation != s.generation) p.finished += rebuild_after_reset(c, s, generation, done);
        }
        if (s.faults != 0) break;
        p.last_progress = warp_now();
        continue;
      }
    }
    if (s.retry_pending != 0) {
      const uint32_t n = retry_pass(c, s, make);
      ring_doorbells(q, s, n, 0);
      if (n > 0 && !note_progress(c, s, p, true, timeout_ns)) break;
    }
  }
  const uint64_t t1 = warp_now();
  if (usable && s.faults != 0) fail_unfinished(c, done);
  if (c.control) publish_state(c, health_state::kIdle, s.in_flight);
  // The run's counters are the differences to the queue's stored ones (not kept live through the loop).
  rep.submitted = s.submitted - q->submitted;
  rep.completed = s.completed - q->completed;
  rep.failed = s.failed - q->failed;
  rep.retries = s.retries - q->retries;
  rep.resubmitted = s.resubmitted - q->resubmitted;
  rep.protocol_errors = s.protocol_errors - q->protocol_errors;
  __syncwarp();
  if (lane == 0) store_state(q, s);
  __syncwarp();
  if (lane == 0) {
    __threadfence();
    disown(q, who);
  }
  rep.elapsed_ns = t1 - t0;
  rep.faults = usable ? s.faults & ~faults0 : s.faults;
  rep.first_error_status = s.first_error_status;
  rep.first_error_tag = s.first_error_tag;
  rep.issued = p.issued;
  return rep;
}

}  // namespace gpunvme::device
