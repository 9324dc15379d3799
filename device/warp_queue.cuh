// GPU-initiated NVMe I/O, the C++ device API: a warp drives one DeviceQueue (see device_queue.h for
// the ownership model). Header-only so that engines' .cu files inline it; needs nvcc, sm_70 or newer.
//
// One pass of warp_pump(), one function per phase:
//   1. reap_pass: every lane loads the status word of up to kPollRounds CQ slots past the head and checks
//      its phase tag; a ballot finds the run of new entries; read_fields_after_phase(); the lanes read
//      SQHD and CID, check each id is in flight exactly once (atomicExch on its busy word), hand the
//      status to the caller and free the ids.
//   2. submit_pass: up to kSubmitRounds * 32 commands, one SQE per lane per round written with four 16-byte
//      stores; command ids come round-robin from the busy table (an id still in flight is never reused).
//   3. ring_doorbells: one system-scope fence, then the SQ tail and CQ head doorbells (lane 0).
//   4. timed_out: no progress for `timeout_ns` on %globaltimer ends the pass with fault::kTimedOut.
#pragma once
#include <cstddef>
#include <cstdint>

#include "device/device_queue.h"
#include "driver/commands.h"
#include "driver/memory_order.h"
#include "driver/prp.h"
#include "driver/queue_ring.h"
#include "driver/status.h"

namespace gpunvme::device {

inline constexpr uint32_t kFullMask = 0xFFFFFFFFu;
inline constexpr uint32_t kPollRounds = 16;    // CQ slots examined per pass: 16 x 32
inline constexpr uint32_t kSubmitRounds = 16;  // SQEs written per pass: up to 16 x 32

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t lane_id() { return threadIdx.x & 31u; }

// 32-bit / 64-bit loads that always go to memory (the controller writes the CQ behind our back).
__device__ __forceinline__ uint32_t load_volatile32(const void* p) {
  return *static_cast<const volatile uint32_t*>(p);
}
__device__ __forceinline__ uint2 load_volatile64(const void* p) {
  uint2 v;
  asm volatile("ld.volatile.global.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// Writes one SQE into the ring with four 16-byte vector stores.
__device__ __forceinline__ void store_sqe(nvme::SubmissionEntry* slot, const nvme::SubmissionEntry& e) {
  const uint4* src = reinterpret_cast<const uint4*>(&e);
  uint4* dst = reinterpret_cast<uint4*>(slot);
#pragma unroll
  for (int k = 0; k < 4; ++k) dst[k] = src[k];
}

// CQE loads by the named fields of nvme::CompletionEntry (driver/commands.h asserts their offsets).
// The phase is checked on the CID+status dword alone; the other fields are read only after
// nvme::read_fields_after_phase(), as one 8-byte load of SQHD, SQID, CID and status.
static_assert(offsetof(nvme::CompletionEntry, status) == offsetof(nvme::CompletionEntry, cid) + 2);
static_assert(offsetof(nvme::CompletionEntry, cid) == offsetof(nvme::CompletionEntry, sqhd) + 4);
static_assert(offsetof(nvme::CompletionEntry, sqhd) % 8 == 0);

// CID in bits 15:0, status half-word (phase tag in bit 16) in bits 31:16.
__device__ __forceinline__ uint32_t load_cqe_cid_status(const nvme::CompletionEntry* e) {
  return load_volatile32(reinterpret_cast<const uint8_t*>(e) + offsetof(nvme::CompletionEntry, cid));
}
// .x: SQHD (15:0) and SQID (31:16); .y: CID and status as load_cqe_cid_status() returns them.
__device__ __forceinline__ uint2 load_cqe_tail(const nvme::CompletionEntry* e) {
  return load_volatile64(reinterpret_cast<const uint8_t*>(e) + offsetof(nvme::CompletionEntry, sqhd));
}
__device__ __forceinline__ uint32_t cqe_phase(uint32_t cid_status) { return (cid_status >> 16) & 1u; }
__device__ __forceinline__ uint32_t cqe_cid(uint32_t cid_status) { return cid_status & 0xFFFFu; }
__device__ __forceinline__ uint32_t cqe_sqhd(uint2 tail) { return tail.x & 0xFFFFu; }
__device__ __forceinline__ nvme::Status cqe_status(uint32_t cid_status) {
  return nvme::Status::from_cqe_status(uint16_t(cid_status >> 16));
}

// The doorbell stores (the only MMIO writes of the device API), after the caller's fence: the SQ
// tail when `sq_tail` is set, the CQ head when `cq_head` is set.
__device__ __forceinline__ void write_doorbells(const DeviceQueue* q, bool ring_sq, uint32_t sq_tail, bool ring_cq,
                                                uint32_t cq_head) {
  if (ring_sq) ring_sq_doorbell(*q, sq_tail);
  if (ring_cq) ring_cq_doorbell(*q, cq_head);
}

// Claims the queue for `who` (lane 0 of a warp, or a single thread). Returns false if held by another.
__device__ __forceinline__ bool try_own(DeviceQueue* q, int32_t who) {
  const int32_t prev = atomicCAS(&q->owner, kNoOwner, who);
  return prev == kNoOwner || prev == who;
}
__device__ __forceinline__ void disown(DeviceQueue* q, int32_t who) { atomicCAS(&q->owner, who, kNoOwner); }

// Builds PRP1/PRP2 for `bytes` at `dst_offset` of `dst`, with the list (if any) in the id's list area.
__device__ __forceinline__ bool prps_for(const DeviceQueue& q, uint16_t cid, const DeviceBuffer& dst,
                                         uint64_t dst_offset, uint64_t bytes, nvme::PrpPair* out) {
  const uint64_t page = uint64_t(1) << q.page_shift;
  const uint64_t first_page = dst_offset >> q.page_shift;
  uint64_t* list = q.prp_lists + uint64_t(cid) * (q.prp_list_bytes / 8);
  const uint64_t list_bus = q.prp_lists_bus + uint64_t(cid) * q.prp_list_bytes;
  return nvme::build_prps(
      dst_offset & (page - 1), bytes, page, [&](uint64_t k) { return dst.bus_of_page(first_page + k); },
      [&](uint32_t) { return nvme::PrpListMemory{list, list_bus}; }, out);
}

// The warp's private copy of a queue's mutable state, uniform across lanes.
struct WarpState {
  nvme::SqRing sq;
  nvme::CqRing cq;
  uint32_t next_cid;
  uint32_t in_flight;
  uint64_t submitted, completed, failed;
  uint32_t faults;
  uint16_t first_error_status;
  uint16_t first_error_cid;
  uint32_t first_error_tag;
};

__device__ __forceinline__ WarpState load_state(const DeviceQueue* q) {
  WarpState s;
  s.sq = q->sq_ring;
  s.cq = q->cq_ring;
  s.next_cid = q->next_cid;
  s.in_flight = q->in_flight;
  s.submitted = q->submitted;
  s.completed = q->completed;
  s.failed = q->failed;
  s.faults = q->faults;
  s.first_error_status = q->first_error_status;
  s.first_error_cid = q->first_error_cid;
  s.first_error_tag = q->first_error_tag;
  return s;
}
__device__ __forceinline__ void store_state(DeviceQueue* q, const WarpState& s) {
  q->sq_ring = s.sq;
  q->cq_ring = s.cq;
  q->next_cid = s.next_cid;
  q->in_flight = s.in_flight;
  q->submitted = s.submitted;
  q->completed = s.completed;
  q->failed = s.failed;
  q->faults = s.faults;
  q->first_error_status = s.first_error_status;
  q->first_error_cid = s.first_error_cid;
  q->first_error_tag = s.first_error_tag;
}

// What one warp_pump() run shares between its phases (uniform across lanes).
struct PumpContext {
  DeviceQueue* q;
  uint32_t entries;
  uint32_t cid_mask;
  uint32_t max_in_flight;
  uint32_t* busy;
  uint32_t* tags;
  const nvme::CompletionEntry* cq;
  nvme::SubmissionEntry* sq;
};

// Phase 1: reaps the run of new CQEs past the head (up to kPollRounds * 32), checks every id is in
// flight exactly once, hands each status to done(tag, status). Returns the entries consumed.
template <class Done>
__device__ __forceinline__ uint32_t reap_pass(const PumpContext& c, WarpState& s, Done& done) {
  const uint32_t lane = lane_id();
  uint32_t reaped = 0;
  if (s.in_flight == 0) return 0;
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
  if (reaped == 0) return 0;
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
  // that is not in flight and a duplicate (in this pass or a later one), in whatever order they come.
  uint32_t was[kPollRounds];
#pragma unroll
  for (uint32_t r = 0; r < kPollRounds; ++r) {
    const uint32_t ahead = r * 32 + lane;
    const uint32_t cid = cqe_cid(f[r].y);
    was[r] = (ahead < reaped && cid <= c.cid_mask) ? atomicExch(&c.busy[cid], 0u) : 0u;
  }
  uint32_t my_sqhd = 0;
  uint32_t bad = 0, good = 0, errs = 0;
  const uint32_t last = reaped - 1;
#pragma unroll
  for (uint32_t r = 0; r < kPollRounds; ++r) {
    if (r * 32 < reaped) {
      const uint32_t ahead = r * 32 + lane;
      const bool active = ahead < reaped;
      const bool valid = active && was[r] != 0;
      const uint32_t cid = cqe_cid(f[r].y);
      const nvme::Status st = cqe_status(f[r].y);
      if (r == last / 32) my_sqhd = cqe_sqhd(f[r]);
      bad += active && !valid;
      if (valid) {
        ++good;
        errs += !st.ok();
        done(c.tags[cid], st);
      }
      // Remember the queue's first failed command (lowest lane of the earliest round).
      const uint32_t err_mask = __ballot_sync(kFullMask, valid && !st.ok());
      if (err_mask != 0 && s.failed == 0 && s.first_error_status == 0) {
        const uint32_t src = __ffs(err_mask) - 1;
        s.first_error_status = uint16_t(__shfl_sync(kFullMask, uint32_t(st.field), src));
        s.first_error_cid = uint16_t(__shfl_sync(kFullMask, cid, src));
        s.first_error_tag = c.tags[s.first_error_cid];
      }
    }
  }
  const uint32_t sqhd = __shfl_sync(kFullMask, my_sqhd, last & 31);
  const uint32_t nbad = __reduce_add_sync(kFullMask, bad);
  const uint32_t ngood = __reduce_add_sync(kFullMask, good);
  const uint32_t nerr = __reduce_add_sync(kFullMask, errs);
  if (nbad) s.faults |= fault::kWrongCid;
  if (sqhd >= c.entries) s.faults |= fault::kBadSqHead; else s.sq.update_head(sqhd);
  s.cq.consume(reaped);
  s.in_flight -= reaped;
  s.completed += ngood;
  s.failed += nerr;
  return reaped;
}

// Phase 2: writes up to kSubmitRounds * 32 of the remaining commands (make(i, cid, &tag)) into the
// SQ, within the depth and the ring's room. Returns the commands written (the caller rings).
template <class Make>
__device__ __forceinline__ uint32_t submit_pass(const PumpContext& c, WarpState& s, uint64_t count, uint64_t& issued,
                                                Make& make) {
  const uint32_t lane = lane_id();
  if (s.faults != 0 || issued >= count || s.in_flight >= c.max_in_flight) return 0;
  uint32_t n = 0;
  const uint64_t want64 = count - issued;
  const uint32_t room = c.max_in_flight - s.in_flight;
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
      const uint32_t k = r * 32 + lane;
      const uint32_t cid = (base + k) & c.cid_mask;
      const bool free_id = bz[r] == 0;
      const uint32_t m = __ballot_sync(kFullMask, free_id);
      const uint32_t idx = n + __popc(m & ((1u << lane) - 1u));
      const bool take = free_id && idx < want;
      if (take) {
        c.busy[cid] = 1;
        uint32_t tag = 0;
        nvme::SubmissionEntry e = make(issued + idx, uint16_t(cid), &tag);
        e.cid = uint16_t(cid);
        c.tags[cid] = tag;
        store_sqe(c.sq + nvme::ring_advance(s.sq.tail, idx, c.entries), e);
      }
      const uint32_t took = __ballot_sync(kFullMask, take);
      if (took != 0) next = base + r * 32 + (31 - __clz(took)) + 1;
      n += __popc(took);
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

// Phase 4: whether the run made no progress for longer than timeout_ns (uniform across lanes).
__device__ __forceinline__ bool timed_out(bool progressed, uint64_t& last_progress, uint64_t timeout_ns) {
  uint64_t now = 0;
  if (lane_id() == 0) now = global_timer_ns();
  now = __shfl_sync(kFullMask, now, 0);
  if (progressed) {
    last_progress = now;
    return false;
  }
  return now - last_progress > timeout_ns;
}

// Drives `count` commands through queue `q` with the calling (full) warp and waits for all of them.
//   make(i, cid, &tag) -> nvme::SubmissionEntry   builds the warp's i-th command (0 <= i < count);
//                                                  the pump stores cid; tag comes back in done().
//   done(tag, status)                              called by the lane that reaped the completion.
// depth caps the commands in flight (besides the ring: entries - 1). Returns this run's report;
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
  PumpContext c{q, q->entries, q->cid_count - 1, q->entries - 1, q->cid_busy, q->cid_tag, q->cq, q->sq};
  if (depth != 0 && depth < c.max_in_flight) c.max_in_flight = depth;
  const uint64_t submitted0 = s.submitted, completed0 = s.completed, failed0 = s.failed;
  const uint32_t faults0 = s.faults;
  uint64_t issued = 0, reaped_total = 0;
  // A queue with a sticky fault does nothing more until the host rebuilds it.
  const bool usable = s.faults == 0;
  uint64_t t0 = global_timer_ns();
  uint64_t last_progress = t0;
  t0 = __shfl_sync(kFullMask, t0, 0);
  while (usable && (reaped_total < count || s.in_flight > 0)) {
    const uint32_t reaped = reap_pass(c, s, done);
    reaped_total += reaped;
    const uint32_t n = submit_pass(c, s, count, issued, make);
    ring_doorbells(q, s, n, reaped);
    if (s.faults != 0) break;
    if (timed_out(n > 0 || reaped > 0, last_progress, timeout_ns)) {
      s.faults |= fault::kTimedOut;
      break;
    }
    if (reaped_total >= count && s.in_flight == 0) break;
  }
  uint64_t t1 = 0;
  if (lane == 0) t1 = global_timer_ns();
  t1 = __shfl_sync(kFullMask, t1, 0);
  if (lane == 0) store_state(q, s);
  __syncwarp();
  if (lane == 0) {
    __threadfence();
    disown(q, who);
  }
  rep.submitted = s.submitted - submitted0;
  rep.completed = s.completed - completed0;
  rep.failed = s.failed - failed0;
  rep.elapsed_ns = t1 - t0;
  rep.faults = s.faults & ~faults0;
  if (!usable) rep.faults = s.faults;
  rep.first_error_status = s.first_error_status;
  rep.first_error_tag = s.first_error_tag;
  return rep;
}

}  // namespace gpunvme::device
