// Recovery inside the warp pump (device/warp_queue.cuh), kept off its hot path:
//   - schedule_retry: a CQE with an error status goes through driver/retry_policy.h, the CPU path's
//     rule; a retry keeps the command id (cid_state::kRetryPending) with its due time on %globaltimer.
//   - retry_pass: re-issues the due ones from their command index (make() again, no host round trip).
//     The pump calls it only while retries are pending: one register compare per pass otherwise.
//   - park / rebuild_rings: the host's controller reset (device/queue_set.h, DeviceQueueSet::quiesce)
//     as a warp sees it: stop submitting, say so in the queue's health word, wait (bounded) for the
//     host to bump RecoveryControl::generation, then start the rings over at slot 0 / phase 1 and
//     send what was in flight again through the retry path.
//   - publish_*: the queue's health word (mapped host memory) that the host's watchdog reads,
//     including the oldest in-flight command, which the host aborts (Admin Abort) when it is overdue;
//     its completion (Command Abort Requested, DNR clear) is re-issued by schedule_retry like any
//     retryable error.
//   - fail_unfinished: a run ending with a sticky fault tells its consumers at once.
#pragma once
#include <cstdint>

#include "device/warp_claim.cuh"
#include "device/warp_state.cuh"
#include "driver/retry_policy.h"

namespace gpunvme::device {

// How often, at most, a running warp stores its progress time for the host's watchdog.
inline constexpr uint64_t kHealthPeriodNs = 100'000;

// ---- The health word (lane 0 stores; system-scope fences so the host sees them in order) ----

__device__ __forceinline__ void publish_state(const PumpContext& c, uint32_t state, uint32_t in_flight) {
  if (c.health == nullptr || lane_id() != 0) return;
  __threadfence_system();  // this warp's doorbell stores land before the state says it parked or left
  volatile QueueHealth* h = c.health;
  h->in_flight = in_flight;
  h->progress = global_timer_ns();
  if (state == health_state::kIdle) h->oldest = kNoOldest;  // the next run starts with none
  h->state = state;
  __threadfence_system();  // the state is visible before this warp next reads the control word
}

__device__ __forceinline__ void publish_progress(const PumpContext& c, const WarpState& s, uint64_t now,
                                                 uint64_t& published) {
  if (c.health == nullptr || now - published < kHealthPeriodNs) return;
  published = now;
  if (lane_id() == 0) {
    volatile QueueHealth* h = c.health;
    h->in_flight = s.in_flight;
    h->progress = now;
  }
}

// The in-flight command submitted first (lowest command index), as pack_oldest(), uniform across
// lanes. Out of line, with plain values: it runs only when the host asks (a stalled queue).
__device__ __noinline__ inline uint64_t scan_oldest(const uint32_t* busy, const uint64_t* cmds, uint32_t cid_mask) {
  uint64_t oldest = kNoOldest;
  __syncwarp();  // other lanes' id-table stores before this scan reads them
#pragma unroll 8
  for (uint32_t cid = lane_id(); cid <= cid_mask; cid += 32) {
    if (busy[cid] != cid_state::kInFlight) continue;
    const uint64_t cmd = cmds[cid];
    const uint64_t key = pack_oldest(cmd & kCmdIndexMask, uint32_t(cmd >> kCmdAttemptShift), cid);
    oldest = key < oldest ? key : oldest;
  }
  return warp_min64(oldest);
}

// Answers the host's request (RecoveryControl::oldest_request): the oldest in-flight command, or
// kNoOldest, into the queue's health word. Asked only for a queue that stopped making progress, so
// a fault-free pass pays nothing for it (the request shares the quiesce word's load and compare;
// publishing it every 10 ms instead measured about 3 % of the command rate).
__device__ __forceinline__ void answer_oldest(const PumpContext& c, const WarpState& s) {
  if (c.health == nullptr) return;
  const uint64_t oldest = s.in_flight != 0 ? scan_oldest(c.busy, c.cmd, c.cid_mask) : kNoOldest;
  if (lane_id() == 0) {
    static_cast<volatile QueueHealth*>(c.health)->oldest = oldest;
    __threadfence_system();
  }
}

// A run that ends with a sticky fault (a wrong command id, its own timeout, a lost controller) hands
// its unfinished commands to done() as failed (Command Abort Requested) right away, so consumers
// waiting on per-command words (the expert fetcher's ready/failed words) end at once instead of at
// their own bounds. Ids stay reserved (kInFlight, kRetryPending): the controller may still own them
// until the host rebuilds the queue. Commands never issued are the caller's: it knows their tags
// (QueueReport::issued). Not counted as completed: the report says how many really finished.
template <class Done>
__device__ void fail_unfinished(const PumpContext& c, Done& done) {
  const nvme::Status aborted = nvme::Status::make(nvme::sct::kGeneric, nvme::sc::kAbortRequested, false);
  __syncwarp();  // other lanes' id-table stores before this scan reads them
  for (uint32_t cid = lane_id(); cid <= c.cid_mask; cid += 32) {
    const uint32_t b = c.busy[cid];
    if (b == cid_state::kInFlight || b == cid_state::kRetryPending) done(c.tags[cid], aborted);
  }
  __syncwarp();
}

// A control word as lane 0 read it: every lane takes the same branch on it (a word the host is
// changing may read differently in two lanes of one load).
__device__ __forceinline__ uint32_t load_control32(const uint32_t* p) {
  return __shfl_sync(kFullMask, load_volatile32(p), 0);
}
// RecoveryControl's quiesce (low half) and oldest_request (high half) in one load, per lane.
__device__ __forceinline__ uint64_t load_control_word(const RecoveryControl* c) {
  const uint2 v = load_volatile64(&c->quiesce);
  return uint64_t(v.x) | (uint64_t(v.y) << 32);
}

// ---- Retries of failed commands ----

// Called per lane on the error path for a valid CQE with a non-success status: whether the policy
// retries it; if so the id stays reserved (kRetryPending) and *due gets the time it may go again.
__device__ __forceinline__ bool schedule_retry(const PumpContext& c, uint32_t cid, nvme::Status st, uint64_t now,
                                               uint64_t* due) {
  const uint64_t cmd = c.cmd[cid];
  const uint32_t attempts = uint32_t(cmd >> kCmdAttemptShift) + 1;  // this completion's submission included
  const nvme::RetryDecision d = nvme::decide_retry(st, attempts, c.q->retry);
  if (d.action != nvme::RetryAction::kRetry) return false;
  c.cmd[cid] = (cmd & kCmdIndexMask) | (uint64_t(attempts) << kCmdAttemptShift);
  *due = now + d.backoff_ns;
  c.retry_at[cid] = *due;
  c.busy[cid] = cid_state::kRetryPending;  // the reap's exchange cleared it; this warp owns the table
  return true;
}

// What reap_errors() decided for one round of a reap pass: per lane, whether its command is retried
// (and when it may go); uniform, the round's first final error when the queue wants one recorded.
struct RoundErrors {
  uint64_t due = ~0ull;
  uint32_t first_tag = 0;
  uint16_t first_status = 0;
  uint16_t first_cid = 0;
  bool retry = false;
  bool first = false;
};

// The error path of one reap round (a warp-uniform branch: some lane's CQE carries an error). Out of
// line and given plain values: inlined into each of reap_pass()'s kPollRounds unrolled rounds it made
// the pump's hot loop about 40 KB longer, and a fault-free pass only jumped over it.
__device__ __noinline__ inline RoundErrors reap_errors(PumpContext c, bool error_lane, uint32_t cid, nvme::Status st,
                                                       bool want_first) {
  RoundErrors out;
  const uint64_t now = warp_now();
  if (error_lane) out.retry = schedule_retry(c, cid, st, now, &out.due);
  // The queue's first final error: the lowest such lane of the earliest round.
  const uint32_t final_mask = __ballot_sync(kFullMask, error_lane && !out.retry);
  if (final_mask != 0 && want_first) {
    const uint32_t src = __ffs(final_mask) - 1;
    out.first = true;
    out.first_status = uint16_t(__shfl_sync(kFullMask, uint32_t(st.field), src));
    out.first_cid = uint16_t(__shfl_sync(kFullMask, cid, src));
    out.first_tag = c.tags[out.first_cid];
  }
  return out;
}

// Re-issues the pending retries that are due, within the ring's room and the depth; returns the SQEs
// written (the caller rings the doorbell with the new commands). Scans the id table: error path only.
template <class Make>
__device__ uint32_t retry_pass(const PumpContext& c, WarpState& s, Make& make) {
  const uint32_t lane = lane_id();
  __syncwarp();  // other lanes' id-table stores (schedule_retry, submit_pass) before this scan reads them
  const uint64_t now = warp_now();
  if (now < s.retry_due) return 0;
  // A pending retry already holds its place in the depth (submit_pass counts it): room is there.
  const uint32_t depth_room = c.max_in_flight > s.in_flight ? c.max_in_flight - s.in_flight : 0;
  const uint32_t ring_room = s.sq.free_slots();
  const uint32_t room = depth_room < ring_room ? depth_room : ring_room;
  if (room == 0) return 0;  // due, but no slot: the next pass, after completions
  uint32_t n = 0, seen = 0;
  uint64_t next_due = ~0ull;
  for (uint32_t base = 0; base <= c.cid_mask && seen < s.retry_pending; base += 32) {
    const uint32_t cid = base + lane;
    const bool pending = cid <= c.cid_mask && c.busy[cid] == cid_state::kRetryPending;
    const uint64_t due = pending ? c.retry_at[cid] : ~0ull;
    const SlotClaim k = claim_slots(pending && due <= now, n, room);
    if (k.take) {
      write_claimed(c, s, cid, k.slot, c.cmd[cid] & kCmdIndexMask, make);
    } else if (pending) {
      next_due = due < next_due ? due : next_due;  // a due one left for lack of room goes next pass
    }
    n += __popc(k.taken);
    seen += __popc(__ballot_sync(kFullMask, pending));
  }
  s.retry_due = warp_min64(next_due);
  if (n > 0) {
    s.sq.claim(n);
    s.in_flight += n;
    s.retry_pending -= n;
  }
  return n;
}

// ---- Controller resets ----

// Rings as a freshly created queue pair has them: SQ tail = head = 0, CQ head 0 with phase 1 (the host
// zeroed the CQ memory before bumping the generation).
__device__ __forceinline__ void restart_rings(WarpState& s) {
  s.sq.tail = 0;
  s.sq.head = 0;
  s.cq.head = 0;
  s.cq.phase = 1u;
}

// A run in progress after a reset: every command that was on the controller is lost and goes back
// through the retry path, due now, as one more attempt (decide_retry_after_timeout); a command whose
// attempts are spent finishes with Abort Requested, a final error naming it.
template <class Done>
__device__ uint32_t rebuild_after_reset(const PumpContext& c, WarpState& s, uint32_t generation, Done& done) {
  const uint32_t lane = lane_id();
  const nvme::Status aborted = nvme::Status::make(nvme::sct::kGeneric, nvme::sc::kAbortRequested, false);
  restart_rings(s);
  __syncwarp();  // other lanes' id-table stores before this scan reads them
  uint32_t requeued = 0, given_up = 0;
  for (uint32_t base = 0; base <= c.cid_mask; base += 32) {  // uniform trip count: ballots inside
    const uint32_t cid = base + lane;
    const bool lost = cid <= c.cid_mask && c.busy[cid] == cid_state::kInFlight;
    bool final_error = false;
    if (lost) {
      const uint64_t cmd = c.cmd[cid];
      const uint32_t attempts = uint32_t(cmd >> kCmdAttemptShift) + 1;
      if (nvme::decide_retry_after_timeout(attempts, c.q->retry).action == nvme::RetryAction::kRetry) {
        c.cmd[cid] = (cmd & kCmdIndexMask) | (uint64_t(attempts) << kCmdAttemptShift);
        c.retry_at[cid] = 0;
        c.busy[cid] = cid_state::kRetryPending;
        ++requeued;
      } else {
        c.busy[cid] = cid_state::kFree;
        final_error = true;
        ++given_up;
        done(c.tags[cid], aborted);
      }
    }
    const uint32_t final_mask = __ballot_sync(kFullMask, final_error);
    if (final_mask != 0 && s.failed == 0 && s.first_error_status == 0) {
      const uint32_t src = __ffs(final_mask) - 1;
      s.first_error_status = aborted.field;
      s.first_error_cid = uint16_t(__shfl_sync(kFullMask, cid, src));
      s.first_error_tag = c.tags[s.first_error_cid];
    }
  }
  const uint32_t nreq = __reduce_add_sync(kFullMask, requeued);
  const uint32_t ngiven = __reduce_add_sync(kFullMask, given_up);
  s.retry_pending += nreq;
  s.retry_due = 0;
  s.resubmitted += nreq;
  s.completed += ngiven;
  s.failed += ngiven;
  s.in_flight = 0;
  s.generation = generation;
  return ngiven;
}

// A queue claimed after a reset it did not live through (no warp held it): commands a faulted run
// left behind belong to that run and are forgotten, the rings restart, sticky faults clear.
__device__ __forceinline__ void adopt_generation(const PumpContext& c, WarpState& s, uint32_t generation) {
  for (uint32_t cid = lane_id(); cid <= c.cid_mask; cid += 32) c.busy[cid] = cid_state::kFree;
  restart_rings(s);
  s.in_flight = 0;
  s.faults = 0;
  s.generation = generation;
  __syncwarp();
}

// Parks the warp while the host resets the controller, bounded by the control's park_timeout_ns.
// Returns true when the host resumed the set (the caller then takes the new generation), false with a
// fault set: kControllerLost (the host could not bring the controller back) or kParkTimedOut.
// The warp says it runs again before it looks at quiesce a last time: a host quiescing anew either
// sees it running (and waits for it to park) or is seen by it (and it parks again).
__device__ __forceinline__ bool wait_for_resume(const PumpContext& c, WarpState& s) {
  const uint64_t t0 = warp_now();
  const uint64_t bound = c.control->park_timeout_ns;
  do {
    publish_state(c, health_state::kParked, s.in_flight);
    while (load_control32(&c.control->quiesce) != 0) {
      if (warp_now() - t0 > bound) {
        s.faults |= fault::kParkTimedOut;
        return false;
      }
      __nanosleep(2000);
    }
    __threadfence();  // the host wrote generation and failed before it cleared quiesce
    if (load_control32(&c.control->failed) != 0) {
      s.faults |= fault::kControllerLost;
      return false;
    }
    publish_state(c, health_state::kRunning, s.in_flight);  // fence after the state store
  } while (load_control32(&c.control->quiesce) != 0);
  return true;
}

}  // namespace gpunvme::device
