// The expert cache's LRU policy as data: which slot every expert of a fetch uses and which expert
// leaves. The CPU ExpertFetcher runs it; the GPU fetcher's place kernel runs the same rules on the
// same state (initial_slot_used(), a touch clock) and the GPU suite checks both agree id for id. A
// GPU prefetch (GpuExpertFetcher::prefetch) is a fetch to this policy: its keys are chosen and
// committed by the same rules (tests/gpu/test_gpu_prefetch.cpp holds that too).
//
// Rules, per fetch of distinct keys (key = layer * n_experts + expert), in request order:
//   1. hits: a resident key keeps its slot; hits are touched first, in request order;
//   2. faults: each takes the least recently touched slot that this fetch has not used (hit or
//      earlier fault); ties go to the lowest slot. Empty slots rank as never touched, the last
//      slot oldest, so an empty cache fills from the last slot down;
//   3. a failed read forgets its key: the slot becomes empty and untouched (evicted first).
// choose() only computes; commit() records. A fetcher commits once its reads are built, and
// forgets a key again if its read is never issued or fails: an expert is never reported resident
// unless its read succeeded or is still in flight.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace gpunvme::stream {

struct CachePlacement {
  uint32_t slot = 0;
  bool hit = false;
};

class ExpertCachePolicy {
 public:
  ExpertCachePolicy() = default;
  ExpertCachePolicy(uint32_t capacity, uint64_t keys);

  // Placement of each of `keys` (distinct, at most capacity()); does not change the cache.
  std::vector<CachePlacement> choose(std::span<const uint64_t> keys) const;
  // Records a choose() result: touches the hits, then installs the faults (evicting their slots' keys).
  void commit(std::span<const uint64_t> keys, std::span<const CachePlacement> placement);
  // Empties the slot holding `key`, if any (its bytes are undefined).
  void forget(uint64_t key);

  uint32_t capacity() const { return uint32_t(slot_key_.size()); }
  std::optional<uint32_t> slot_of(uint64_t key) const;
  bool resident(uint64_t key) const { return slot_of(key).has_value(); }
  uint32_t resident_count() const { return resident_; }
  bool full() const { return resident_ == capacity(); }
  // Every key that is resident, as where[key] = slot or -1 (resident_per_layer and tests).
  const std::vector<int32_t>& where() const { return where_; }

  // The starting touch clock of an empty cache, for the GPU fetcher's tables.
  static std::vector<uint64_t> initial_slot_used(uint32_t capacity);
  static uint64_t initial_clock(uint32_t capacity) { return capacity; }

 private:
  std::vector<int32_t> where_;      // [keys] slot or -1
  std::vector<int64_t> slot_key_;   // [capacity] key or -1
  std::vector<uint64_t> slot_used_; // [capacity] touch time
  uint64_t clock_ = 0;
  uint32_t resident_ = 0;
};

}  // namespace gpunvme::stream
