// What the GPU expert fetcher leaves in device memory for the kernels that consume the experts of a
// token: plain data, shared by host and device code (see gpu_expert_fetcher.h).
#pragma once
#include <cstdint>

#include "driver/compiler.h"

namespace gpunvme::stream {

inline constexpr uint32_t kMaxExpertParts = 4;  // gate, up, down (+ one spare: a split tensor)
// Readiness words of an overlapped fetch (GpuExpertFetcher::fetch_overlapped): per routing id k, per
// model::Projection value (gate, up, down, gate+up), per slice s of that part:
// part_ready()[ready_word(k, proj, s)] equals the fetch's token once every read overlapping bytes
// [s * B, (s + 1) * B) of the part ended, B = part_slice_bytes(part bytes) (or it was a cache hit, or
// the expert has no such part or slice): a consumer may then read those bytes, or find `failed` set.
// A part is sliced so that a kernel can start on its first rows while the rest still stream: the
// product of a 33 MB Mixtral part waited for all of it, about 1 ms after the layer's last read.
inline constexpr uint32_t kProjectionWords = 4;
inline constexpr uint32_t kMaxPartSlices = 8;
inline constexpr uint64_t kMinSliceBytes = 4ull << 20;  // smaller parts are one slice: a wait and a launch each
inline constexpr uint32_t kReadyWordsPerId = kProjectionWords * kMaxPartSlices;

GPUNVME_HD constexpr uint64_t part_slice_bytes(uint64_t part_bytes) {
  const uint64_t even = (part_bytes + kMaxPartSlices - 1) / kMaxPartSlices;
  return even > kMinSliceBytes ? even : kMinSliceBytes;
}
GPUNVME_HD constexpr uint32_t part_slices(uint64_t part_bytes) {
  return part_bytes == 0 ? 1u : uint32_t((part_bytes + part_slice_bytes(part_bytes) - 1) / part_slice_bytes(part_bytes));
}
GPUNVME_HD constexpr uint32_t ready_word(uint32_t k, uint32_t proj, uint32_t slice) {
  return (k * kProjectionWords + proj) * kMaxPartSlices + slice;
}
static_assert(part_slices(1) == 1 && part_slices(kMinSliceBytes) == 1 && part_slices(kMinSliceBytes + 1) == 2);
static_assert(part_slices(33ull << 20) == 8 && part_slices(1ull << 40) == kMaxPartSlices);

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
  // A hit on an expert the running prefetch is still reading (prefetches on queues of their own):
  // 1 + its index in the prefetch's table; the pump publishes its readiness when those reads end.
  uint32_t pending = 0;
  uint64_t part_offset[kMaxExpertParts] = {};      // scratchpad offset of each part's first byte
  uint64_t part_bytes[kMaxExpertParts] = {};
};

// Scratchpad offset of expert e's part `proj` (model::Projection) that is `bytes` long, or kNoPart: every
// consumer looks a part up this way, so a part of another size (not the matrix it was cut for) is read
// by none of them.
inline constexpr uint64_t kNoPart = ~0ull;
GPUNVME_HD constexpr uint64_t find_part(const GpuFetchedExpert& e, uint32_t proj, uint64_t bytes) {
  uint64_t off = kNoPart;
  for (uint32_t p = 0; p < e.part_count && p < kMaxExpertParts; ++p)
    if (e.part_proj[p] == proj && e.part_bytes[p] == bytes) off = e.part_offset[p];
  return off;
}

// A fetch's experts as a consumer copied them into GPU memory before reading them (the LLM engine's
// one-token products, examples/llm/compute/gpu_expert_stage.h): distinct expert d (an index into the
// fetch's experts) at base + d * stride, each byte at the same distance from the expert's first as in
// the scratchpad and at the same address mod 4096 (so a kernel takes the same alignment path). Whoever
// else reads them there (the load check) reads GPU memory, not the host link a second time.
struct StagedExperts {
  uint8_t* base = nullptr;  // null: not staged, the bytes are read in the scratchpad
  uint64_t stride = 0;      // bytes per distinct expert: a multiple of 4096, at least a slot + 4096
  uint32_t buffer = 0;      // which of the consumer's buffers (a reader of it delays its reuse)
  uint32_t hits = 0;        // 1: the hits that were not pending were copied whole right after the placement
};
inline constexpr uint64_t kStagedAlign = 4096;
// Offset from `base` of the byte at scratchpad offset `scratch_offset` of distinct expert d, `e`.
GPUNVME_HD constexpr uint64_t staged_offset(const StagedExperts& s, uint32_t d, const GpuFetchedExpert& e,
                                            uint64_t scratch_offset) {
  return uint64_t(d) * s.stride + (e.offset & (kStagedAlign - 1)) + (scratch_offset - e.offset);
}

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
