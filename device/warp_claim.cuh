// The SQ-slot claim that the submit pass (warp_queue.cuh, new commands) and the retry pass
// (warp_recovery.cuh, due re-issues) share: the lanes holding a command take consecutive slots past
// the tail in lane order, after those the pass already claimed and up to its room; each taker writes
// its SQE there. One place, so that first submissions and re-issues fill the ring the same way.
// Header-only, nvcc, sm_70 or newer.
#pragma once
#include <cstdint>

#include "device/device_queue.h"
#include "device/warp_state.cuh"
#include "driver/queue_ring.h"

namespace gpunvme::device {

// One lane's part in a claim round (`taken` is uniform across lanes).
struct SlotClaim {
  bool take;       // this lane writes an SQE at `slot`
  uint32_t slot;   // slots past the SQ tail (meaningful where take)
  uint32_t taken;  // ballot of the lanes that took a slot this round
};

// `has_command`: this lane holds one; `claimed`: slots this pass took in earlier rounds; `room`: the
// most this pass may take. Lanes past the room keep their command for a later pass.
__device__ __forceinline__ SlotClaim claim_slots(bool has_command, uint32_t claimed, uint32_t room) {
  const uint32_t below = __ballot_sync(kFullMask, has_command) & ((1u << lane_id()) - 1u);
  const uint32_t slot = claimed + __popc(below);
  const bool take = has_command && slot < room;
  return {take, slot, __ballot_sync(kFullMask, take)};
}

// Marks `cid` in flight and writes command `index`'s SQE (make(index, cid, &tag) builds it; the id
// goes in here) into the claimed slot; the tag is kept for done().
template <class Make>
__device__ __forceinline__ void write_claimed(const PumpContext& c, const WarpState& s, uint32_t cid, uint32_t slot,
                                              uint64_t index, Make& make) {
  c.busy[cid] = cid_state::kInFlight;
  uint32_t tag = 0;
  nvme::SubmissionEntry e = make(index, uint16_t(cid), &tag);
  e.cid = uint16_t(cid);
  c.tags[cid] = tag;
  store_sqe(c.sq + nvme::ring_advance(s.sq.tail, slot, c.entries), e);
}

}  // namespace gpunvme::device
