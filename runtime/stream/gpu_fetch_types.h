// What the GPU expert fetcher leaves in device memory for the kernels that consume the experts of a
// token: plain data, shared by host and device code (see gpu_expert_fetcher.h).
#pragma once
#include <cstdint>

namespace gpunvme::stream {

inline constexpr uint32_t kMaxExpertParts = 4;  // gate, up, down (+ one spare: a split tensor)
// Readiness words per routing id of an overlapped fetch (GpuExpertFetcher::fetch_overlapped), one per
// model::Projection value (gate, up, down, gate+up): part_ready()[k * kProjectionWords + proj] equals
// the fetch's token once every read of that projection of routing id k's expert ended (or it was a
// cache hit, or the expert has no such part): a consumer may then read it, or find `failed` set.
inline constexpr uint32_t kProjectionWords = 4;

// One distinct selected expert of the current fetch, in first-seen order of the routing ids.
struct GpuFetchedExpert {
  uint32_t expert = 0;
  uint32_t hit = 0;          // 1: was resident in the cache, no read
  uint64_t offset = 0;       // scratchpad offset of its first block (cache slot or packed position)
  uint64_t bytes = 0;        // scratchpad bytes it spans
  uint32_t ready = 0;        // == GpuFetchResult::token once its bytes are in the scratchpad
  uint32_t failed = 0;       // status field of a failed read (then `ready` never matches)
  uint32_t part_count = 0;
  uint32_t part_proj[kMaxExpertParts] = {};        // model::Projection
  uint64_t part_offset[kMaxExpertParts] = {};      // scratchpad offset of each part's first byte
  uint64_t part_bytes[kMaxExpertParts] = {};
};

namespace fetch_error {
inline constexpr uint32_t kNone = 0;
inline constexpr uint32_t kBadExpertId = 1;    // an id >= the model's experts per layer
inline constexpr uint32_t kTooMany = 2;        // more distinct experts than max_experts_per_fetch
inline constexpr uint32_t kNoSlices = 3;       // the expert has no slices in the model
}  // namespace fetch_error

struct GpuFetchResult {
  uint32_t token = 0;        // fetch number, from 1; `ready` flags compare against it
  uint32_t count = 0;        // distinct experts (entries of `experts`)
  uint32_t error = 0;        // fetch_error::*; no reads were issued when set
  uint32_t error_value = 0;  // the offending id
  uint32_t commands = 0;     // reads issued
  uint32_t layer = 0;
  // followed in memory by GpuFetchedExpert experts[max_experts_per_fetch] (gpu_expert_fetcher.h)
};
static_assert(sizeof(GpuFetchResult) % 8 == 0);

}  // namespace gpunvme::stream
