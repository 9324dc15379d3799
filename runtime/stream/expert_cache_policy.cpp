#include "runtime/stream/expert_cache_policy.h"

#include <algorithm>

#include "host/error.h"

namespace gpunvme::stream {

std::vector<uint64_t> ExpertCachePolicy::initial_slot_used(uint32_t capacity) {
  std::vector<uint64_t> used(capacity);
  for (uint32_t i = 0; i < capacity; ++i) used[i] = capacity - 1 - i;
  return used;
}

ExpertCachePolicy::ExpertCachePolicy(uint32_t capacity, uint64_t keys)
    : where_(keys, -1), slot_key_(capacity, -1), slot_used_(initial_slot_used(capacity)),
      clock_(initial_clock(capacity)) {}

std::optional<uint32_t> ExpertCachePolicy::slot_of(uint64_t key) const {
  if (key >= where_.size() || where_[key] < 0) return std::nullopt;
  return uint32_t(where_[key]);
}

std::vector<CachePlacement> ExpertCachePolicy::choose(std::span<const uint64_t> keys) const {
  if (keys.size() > capacity())
    throw Error(ErrorKind::kInvalidArgument, "expert cache: " + std::to_string(keys.size()) +
                                                 " experts in one fetch; the cache holds " + std::to_string(capacity()));
  std::vector<CachePlacement> out(keys.size());
  std::vector<bool> taken(capacity(), false);
  for (size_t i = 0; i < keys.size(); ++i)
    if (auto s = slot_of(keys[i])) {
      out[i] = {*s, true};
      taken[*s] = true;
    }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (out[i].hit) continue;
    uint32_t victim = 0;
    uint64_t oldest = ~0ull;
    for (uint32_t s = 0; s < capacity(); ++s)
      if (!taken[s] && slot_used_[s] < oldest) {
        oldest = slot_used_[s];
        victim = s;
      }
    out[i].slot = victim;
    taken[victim] = true;
  }
  return out;
}

void ExpertCachePolicy::commit(std::span<const uint64_t> keys, std::span<const CachePlacement> placement) {
  for (size_t i = 0; i < keys.size(); ++i)
    if (placement[i].hit) slot_used_[placement[i].slot] = ++clock_;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (placement[i].hit) continue;
    const uint32_t v = placement[i].slot;
    if (slot_key_[v] >= 0) where_[size_t(slot_key_[v])] = -1;
    else ++resident_;
    slot_key_[v] = int64_t(keys[i]);
    where_[keys[i]] = int32_t(v);
    slot_used_[v] = ++clock_;
  }
}

void ExpertCachePolicy::forget(uint64_t key) {
  const auto s = slot_of(key);
  if (!s) return;
  where_[key] = -1;
  slot_key_[*s] = -1;
  slot_used_[*s] = 0;
  --resident_;
}

}  // namespace gpunvme::stream
