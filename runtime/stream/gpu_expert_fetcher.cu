#include "runtime/stream/gpu_expert_fetcher.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "device/queue_set.h"
#include "host/error.h"
#include "runtime/stream/expert_cache_policy.h"
#include "runtime/stream/expert_layout.h"
#include "runtime/stream/gpu_ticket_pump.cuh"
#include "runtime/stream/layer_streamer.h"

namespace gpunvme::stream {

// One slice of an expert, as the place kernel needs it.
struct GpuPart {
  uint64_t lba = 0;
  uint64_t dest_rel = 0;      // its first block, relative to the expert's start in the scratchpad
  uint32_t blocks = 0;
  uint32_t proj = 0;
  uint32_t byte_in_first = 0;
  uint32_t pad = 0;
  uint64_t bytes = 0;
};

// One read the pump issues: `blocks` from `lba` into scratchpad offset `dst`, for distinct expert `sel`.
struct FetchCmd {
  uint64_t lba = 0;
  uint64_t dst = 0;
  uint32_t blocks = 0;
  uint32_t sel = 0;
  uint32_t proj = 0;  // model::Projection of its part (< kProjectionWords)
  uint16_t slice_first = 0, slice_last = 0;  // the part's slices its bytes overlap (gpu_fetch_types.h)
};

struct DeviceFetchMetrics {
  unsigned long long tokens, requested, faults, hits, bytes_read, steady_tokens, steady_faults;
  unsigned long long prefetches, prefetch_reads, prefetch_bytes, prefetch_hits, prefetch_wasted, prefetch_wasted_bytes;
  unsigned long long prefetch_unsettled;  // reads of the latest prefetch that no placement has settled yet
  unsigned long long prefetch_cut;        // prefetch experts whose remaining reads were cut (cut_wrong_prefetch)
  unsigned long long prefetch_cut_bytes;  // bytes those cut reads did not move (counted when a read is issued cut)
  uint32_t last_faults, pad;
};

// Tables: the demand fetch's, and two for prefetches: concurrent prefetches alternate, so that a
// prefetch can be placed while the previous demand fetch's pump still reads the previous prefetch's.
inline constexpr uint32_t kDemand = 0, kPrefetch = 1, kTables = 3;
inline constexpr uint32_t kNoTable = ~0u;

// One fetch's tables. The demand fetch's are what the consumers read (device_result() ...); the
// prefetch has its own, so that placing a prefetch never touches what a running consumer reads.
struct FetchTable {
  GpuFetchResult* result = nullptr;
  GpuFetchedExpert* experts = nullptr;  // [max_experts]
  uint32_t* selection = nullptr;        // [max_ids]
  FetchCmd* cmds = nullptr;             // [max_commands]
  uint32_t* remaining = nullptr;        // [max_experts] reads not yet completed
  uint32_t* part_remaining = nullptr;   // [max_experts * kReadyWordsPerId] the same per projection and slice
  uint32_t* part_ready = nullptr;       // [max_ids * kReadyWordsPerId] per routing id (gpu_fetch_types.h ready_word)
  uint32_t n_ids = 0;                   // routing ids of the fetch (selection's entries)
  uint32_t ncmds = 0;
  uint32_t failures_checked = 1;        // its failed reads were forgotten (once: a later fetch may refill the key)
  uint32_t unsettled = 0;               // prefetch: its reads not yet counted as hits or waste
  uint32_t pending_from = kNoTable;      // demand: the prefetch table its pending hits come from
  uint32_t behind_token = 0;             // concurrent prefetch: the demand fetch it queues behind (0: none)
};

struct GpuFetcherState {
  // Tables, built once.
  uint32_t n_layers = 0, n_experts = 0;
  uint32_t max_experts = 0, capacity = 0, max_commands = 0, lba_shift = 0;
  uint32_t max_blocks = 0, warmup_tokens = 0;
  uint64_t expert_stride = 0;
  const uint32_t* part_first = nullptr;  // [L*E + 1]
  const GpuPart* parts = nullptr;
  const uint64_t* packed = nullptr;      // [L*E] scratchpad bytes of each expert, page rounded
  // Cache (LRU by a touch clock; slot_used of untouched slots stays below the clock).
  int32_t* where = nullptr;        // [L*E] slot or -1
  long long* slot_key = nullptr;   // [capacity] key or -1
  unsigned long long* slot_used = nullptr;  // [capacity]
  unsigned long long clock = 0;
  uint32_t resident = 0;
  uint32_t concurrent_prefetch = 0;     // prefetches read on queues of their own (GpuExpertFetcher ctor)
  uint32_t cut_wrong = 0;               // FetcherOptions::cut_wrong_prefetches (with concurrent prefetches only)
  FetchTable table[kTables];            // [kDemand], [kPrefetch], [kPrefetch + 1]
  uint32_t latest_prefetch = kPrefetch;  // the table of the most recently placed prefetch
  uint32_t gate_reads = 0;               // a concurrent prefetch's reads start once the demand has this few left (queue_behind_demand)
  DeviceFetchMetrics metrics{};
  // Stall: from routing done (stall_begin on the consumer's stream) to the fetch's reads done.
  unsigned long long stall_t0 = 0;
  unsigned long long* stall_ns = nullptr;  // [n_layers]
  // The reads' part of the stall: from the place kernel's end (the reads are written) to the reads done.
  unsigned long long reads_t0 = 0;
  unsigned long long* read_ns = nullptr;   // [n_layers]
  // After the reads: from the last demand fetch's reads done to its consumer's kernels done (consumed()).
  unsigned long long reads_end = 0;
  uint32_t reads_end_token = 0;            // the demand fetch reads_end belongs to (its result token)
  uint32_t pad2 = 0;
  unsigned long long* tail_ns = nullptr;   // [n_layers]
};

namespace {

using device::check_cuda;
using device::kFullMask;

cudaStream_t cu(cuda_stream_t s) { return reinterpret_cast<cudaStream_t>(s); }

// Least recently touched slot not touched by this fetch (slot_used <= fetch_start); ties: lowest index.
__device__ uint32_t lru_victim(const GpuFetcherState& s, unsigned long long fetch_start) {
  const uint32_t lane = threadIdx.x & 31u;
  unsigned long long best = ~0ull;
  uint32_t best_i = ~0u;
  for (uint32_t i = lane; i < s.capacity; i += 32) {
    const unsigned long long u = s.slot_used[i];
    if (u <= fetch_start && u < best) {
      best = u;
      best_i = i;
    }
  }
  for (int d = 16; d > 0; d >>= 1) {
    const unsigned long long ob = __shfl_xor_sync(kFullMask, best, d);
    const uint32_t oi = __shfl_xor_sync(kFullMask, best_i, d);
    if (ob < best || (ob == best && oi < best_i)) {
      best = ob;
      best_i = oi;
    }
  }
  return best_i;
}

// place_experts, phase by phase. The cache rules are ExpertCachePolicy's (expert_cache_policy.h);
// the GPU suite runs this kernel and the policy object on the same id sequences.

// A prefetch expert whose remaining reads were cut (cut_wrong_prefetch): not an NVMe status (those
// carry 0x10000), so read_ended never sets its `ready`. Its slot leaves the cache at once but stays
// parked (never a victim: no touch clock reaches kParked) while its reads already issued still land.
inline constexpr uint32_t kCutRead = 0x20000u;
inline constexpr unsigned long long kParked = ~0ull;

// Key `key` leaves the cache (if resident); its slot gets touch value `used` (0: free, the first
// victim; kParked: no victim until freed).
__device__ void drop_key(GpuFetcherState& s, uint64_t key, unsigned long long used) {
  const int32_t slot = s.where[key];
  if (slot < 0) return;
  s.where[key] = -1;
  s.slot_key[slot] = -1;
  s.slot_used[slot] = used;
  s.resident -= 1;
}

// Whether the first `count` experts of table `t` include `expert`.
__device__ bool selects(const FetchTable& t, uint32_t count, uint32_t expert) {
  for (uint32_t d = 0; d < count; ++d)
    if (t.experts[d].expert == expert) return true;
  return false;
}

// Phase 1 (lane 0): a previous fetch's failed read leaves the cache: its slot's bytes are undefined.
// A cut expert's parked slot becomes free (its prefetch's reads have ended: see launch()).
__device__ void forget_failed_reads(GpuFetcherState& s, FetchTable& t) {
  const GpuFetchResult* r = t.result;
  if (t.failures_checked) return;
  t.failures_checked = 1;
  if (s.capacity == 0 || r->error != fetch_error::kNone) return;
  for (uint32_t d = 0; d < r->count; ++d) {
    const GpuFetchedExpert& e = t.experts[d];
    if (e.failed == 0 || e.hit) continue;
    if (e.failed & kCutRead) {
      const uint64_t slot = e.offset / s.expert_stride;
      if (s.slot_used[slot] == kParked) s.slot_used[slot] = 0;
      continue;
    }
    drop_key(s, uint64_t(r->layer) * s.n_experts + e.expert, 0);
  }
}

// Phase 2 (warp): the distinct experts of the routing ids, in first-seen order, and each id's
// distinct index; returns fetch_error::* (and sets error_value) for a bad id, too many, no slices:
// the error of the first id that has one, as a scan in id order stops there. Why a warp: one lane
// scanning the distinct experts so far for each id was a global-memory round trip per comparison,
// in the chain between the router and the first read of every fetched layer.
__device__ uint32_t select_experts(const GpuFetcherState& s, FetchTable& t, uint32_t layer, const uint32_t* ids,
                                   uint32_t n_ids, uint32_t& count, uint32_t& error_value) {
  const uint32_t lane = threadIdx.x & 31u;
  const uint32_t n_experts = s.n_experts, max_experts = s.max_experts;
  const bool bad_layer = layer >= s.n_layers;
  GpuFetchedExpert* ex = t.experts;
  count = 0;
  for (uint32_t i0 = 0; i0 < n_ids; i0 += 32) {
    const uint32_t i = i0 + lane;
    const bool in = i < n_ids;
    const uint32_t id = in ? ids[i] : ~0u;
    uint32_t err = in && (id >= n_experts || bad_layer) ? fetch_error::kBadExpertId : fetch_error::kNone;
    int32_t prior = -1;  // its distinct index from an earlier group of 32 ids
    for (uint32_t d = 0; i0 > 0 && in && err == fetch_error::kNone && d < count && prior < 0; ++d)
      if (ex[d].expert == id) prior = int32_t(d);
    const uint32_t same = __match_any_sync(kFullMask, id) & __ballot_sync(kFullMask, in);
    const uint32_t leader = same ? uint32_t(__ffs(same) - 1) : lane;
    const bool fresh = in && err == fetch_error::kNone && prior < 0 && leader == lane;
    const uint32_t fresh_mask = __ballot_sync(kFullMask, fresh);
    const uint32_t rank = count + __popc(fresh_mask & ((1u << lane) - 1u));
    if (fresh) {
      const uint64_t key = uint64_t(layer) * n_experts + id;
      if (rank >= max_experts) err = fetch_error::kTooMany;
      else if (s.part_first[key + 1] == s.part_first[key]) err = fetch_error::kNoSlices;
    }
    const uint32_t err_mask = __ballot_sync(kFullMask, err != fetch_error::kNone);
    if (err_mask) {
      const uint32_t first = uint32_t(__ffs(err_mask) - 1);
      error_value = __shfl_sync(kFullMask, id, first);
      return __shfl_sync(kFullMask, err, first);
    }
    if (fresh) {
      GpuFetchedExpert e{};
      e.expert = id;
      ex[rank] = e;
    }
    const uint32_t leader_rank = __shfl_sync(kFullMask, rank, leader);
    if (in) t.selection[i] = prior >= 0 ? uint32_t(prior) : leader_rank;
    count += __popc(fresh_mask);
    __syncwarp();  // this group's experts before the next group's lanes compare with them
  }
  return fetch_error::kNone;
}

// Phase 3 (lane 0): hits keep their slot and are touched first, in selection order, so no victim
// chosen below is an expert of this fetch.
__device__ void touch_hits(GpuFetcherState& s, FetchTable& t, uint32_t layer, uint32_t count) {
  for (uint32_t d = 0; d < count; ++d) {
    GpuFetchedExpert& e = t.experts[d];
    const int32_t slot = s.where[uint64_t(layer) * s.n_experts + e.expert];
    if (slot < 0) continue;
    e.hit = 1;
    e.offset = uint64_t(slot) * s.expert_stride;
    s.slot_used[slot] = ++s.clock;
  }
}

// Phase 3b (lane 0, concurrent prefetches): a hit on an expert the latest prefetch read for this
// layer and has not finished reading is pending: its bytes are still arriving in the slot.
__device__ void mark_pending_hits(const GpuFetcherState& s, FetchTable& t, uint32_t layer, uint32_t count) {
  t.pending_from = s.latest_prefetch;
  const FetchTable& p = s.table[s.latest_prefetch];
  const GpuFetchResult* pr = p.result;
  const bool live = s.concurrent_prefetch && pr->layer == layer && pr->error == fetch_error::kNone;
  for (uint32_t d = 0; d < count; ++d) {
    GpuFetchedExpert& e = t.experts[d];
    e.pending = 0;
    for (uint32_t q = 0; live && e.hit && q < pr->count; ++q) {
      const GpuFetchedExpert& pe = p.experts[q];
      if (pe.expert != e.expert || pe.hit) continue;
      if (*const_cast<const volatile uint32_t*>(&pe.ready) != pr->token) e.pending = q + 1;
      break;
    }
  }
}

// Phase 3c (lane 0, cut_wrong): experts the latest prefetch reads for this layer that this fetch does
// not select: their reads not yet issued shrink to one block (pump_fetch), their keys leave the cache
// (a later fetch of them is a fault, not a hit on half-read bytes) and their slots are parked until
// the next prefetch's placement, which waits for this prefetch's reads, frees them. Hits on the
// prefetch, the pending ones included, are selected: nothing waits for an expert cut here. At most
// the prefetch's experts are parked, so with the 2 x k slots a prefetch needs, a fetch still finds
// k victims.
__device__ void cut_wrong_prefetch(GpuFetcherState& s, const FetchTable& t, uint32_t layer, uint32_t count) {
  FetchTable& p = s.table[s.latest_prefetch];
  const GpuFetchResult* pr = p.result;
  if (!s.cut_wrong || pr->layer != layer || pr->error != fetch_error::kNone) return;
  for (uint32_t q = 0; q < pr->count; ++q) {
    GpuFetchedExpert& pe = p.experts[q];
    if (pe.hit || *const_cast<const volatile uint32_t*>(&pe.ready) == pr->token) continue;
    if (selects(t, count, pe.expert) || atomicCAS(&pe.failed, 0u, kCutRead) != 0u) continue;
    s.metrics.prefetch_cut += 1;
    drop_key(s, uint64_t(layer) * s.n_experts + pe.expert, kParked);
  }
  p.failures_checked = 0;  // its parked slots are freed at the next prefetch's placement
}

// Phase 4 (warp): each fault takes the least recently used slot (warp-wide search), or the next
// packed position without a cache.
__device__ void place_faults(GpuFetcherState& s, FetchTable& t, uint32_t layer, uint32_t count,
                             unsigned long long fetch_start) {
  const uint32_t lane = threadIdx.x & 31u;
  GpuFetchedExpert* ex = t.experts;
  uint64_t packed_at = 0;
  if (s.capacity == 0) {  // packed back to back: an exclusive prefix sum, 32 experts at a time
    for (uint32_t d0 = 0; d0 < count; d0 += 32) {
      const uint32_t d = d0 + lane;
      const uint64_t bytes = d < count ? s.packed[uint64_t(layer) * s.n_experts + ex[d].expert] : 0;
      uint64_t upto = bytes;  // inclusive
      for (uint32_t o = 1; o < 32; o <<= 1) {
        const uint64_t v = __shfl_up_sync(kFullMask, upto, o);
        if (lane >= o) upto += v;
      }
      if (d < count) ex[d].offset = packed_at + upto - bytes;
      packed_at += __shfl_sync(kFullMask, upto, 31);
    }
    __syncwarp();
    return;
  }
  for (uint32_t d = 0; d < count; ++d) {
    if (ex[d].hit) continue;
    const uint64_t key = uint64_t(layer) * s.n_experts + ex[d].expert;
    if (s.capacity > 0) {
      const uint32_t v = lru_victim(s, fetch_start);
      if (lane == 0) {
        const long long old = s.slot_key[v];
        if (old >= 0) s.where[old] = -1; else s.resident += 1;
        s.slot_key[v] = (long long)key;
        s.where[key] = int32_t(v);
        s.slot_used[v] = ++s.clock;
        ex[d].offset = uint64_t(v) * s.expert_stride;
      }
    } else if (lane == 0) {
      ex[d].offset = packed_at;
    }
    packed_at += s.packed[key];
    __syncwarp();
  }
}

// Part `k` of lane k's registers, in every lane (a GpuPart is 48 bytes: a shuffle per field).
__device__ GpuPart shfl_part(const GpuPart& mine, uint32_t k) {
  GpuPart p;
  p.lba = __shfl_sync(kFullMask, mine.lba, k);
  p.dest_rel = __shfl_sync(kFullMask, mine.dest_rel, k);
  p.blocks = __shfl_sync(kFullMask, mine.blocks, k);
  p.proj = __shfl_sync(kFullMask, mine.proj, k);
  p.byte_in_first = __shfl_sync(kFullMask, mine.byte_in_first, k);
  p.bytes = __shfl_sync(kFullMask, mine.bytes, k);
  return p;
}

struct FetchCounts {
  uint32_t commands = 0;
  uint32_t faults = 0;
  uint64_t bytes_read = 0;
};

// Phase 5 (warp): every expert's parts (lane 0) and the faults' reads (spread over the lanes).
__device__ FetchCounts write_reads(const GpuFetcherState& s, FetchTable& t, uint32_t layer, uint32_t count,
                                   uint32_t token) {
  const uint32_t lane = threadIdx.x & 31u;
  GpuFetchedExpert* ex = t.experts;
  FetchCounts n;
  // Expert d's table entries, loaded by lane d % 32 for 32 experts at once (one round trip to global
  // memory for all of them instead of two per expert) and handed out below.
  uint32_t my_p0 = 0, my_p1 = 0, my_hit = 1, my_pending = 0;
  uint64_t my_key = 0, my_base = 0;
  for (uint32_t d = 0; d < count; ++d) {
    if (d % 32 == 0 && d + lane < count) {
      const GpuFetchedExpert& e = ex[d + lane];
      my_key = uint64_t(layer) * s.n_experts + e.expert;
      my_p0 = s.part_first[my_key];
      my_p1 = s.part_first[my_key + 1];
      my_hit = e.hit;
      my_pending = e.pending;
      my_base = e.offset;
    }
    const uint32_t src = d % 32;
    const uint64_t key = __shfl_sync(kFullMask, my_key, src);
    const uint32_t p0 = __shfl_sync(kFullMask, my_p0, src), p1 = __shfl_sync(kFullMask, my_p1, src);
    const uint64_t base = __shfl_sync(kFullMask, my_base, src);
    const bool fault = __shfl_sync(kFullMask, my_hit, src) == 0;
    const bool pending = __shfl_sync(kFullMask, my_pending, src) != 0;
    uint32_t mine = 0;
    // A pending hit's words stay unpublished (publish_pending_hits sets them when its reads end).
    for (uint32_t i = lane; i < kReadyWordsPerId; i += 32) t.part_remaining[d * kReadyWordsPerId + i] = pending ? 1 : 0;
    const GpuPart my_part = p0 + lane < p1 ? s.parts[p0 + lane] : GpuPart{};  // lane k: the expert's part k
    __syncwarp();
    for (uint32_t p = p0; p < p1; ++p) {
      const GpuPart part = shfl_part(my_part, p - p0);
      if (lane == 0) {
        const uint32_t k = p - p0;
        ex[d].part_proj[k] = part.proj;
        ex[d].part_offset[k] = base + part.dest_rel + part.byte_in_first;
        ex[d].part_bytes[k] = part.bytes;
      }
      if (!fault) continue;
      const uint32_t chunks = (part.blocks + s.max_blocks - 1) / s.max_blocks;
      const uint64_t slice = part_slice_bytes(part.bytes);
      for (uint32_t c = lane; c < chunks; c += 32) {
        const uint64_t b0 = uint64_t(c) * s.max_blocks;
        FetchCmd cmd;
        cmd.lba = part.lba + b0;
        cmd.blocks = uint32_t(min(uint64_t(s.max_blocks), uint64_t(part.blocks) - b0));
        cmd.dst = base + part.dest_rel + (b0 << s.lba_shift);
        cmd.sel = d;
        cmd.proj = part.proj;
        // The part's bytes this read carries: [lo, hi) from the part's first byte (byte_in_first in).
        const uint64_t lo = (b0 << s.lba_shift) > part.byte_in_first ? (b0 << s.lba_shift) - part.byte_in_first : 0;
        const uint64_t end = ((b0 + cmd.blocks) << s.lba_shift) - part.byte_in_first;
        const uint64_t hi = end < part.bytes ? end : part.bytes;
        cmd.slice_first = uint16_t(lo / slice);
        cmd.slice_last = uint16_t(hi > lo ? (hi - 1) / slice : lo / slice);
        if (cmd.slice_last >= kMaxPartSlices) cmd.slice_last = kMaxPartSlices - 1;  // only a read past the part's end
        if (cmd.slice_first > cmd.slice_last) cmd.slice_first = cmd.slice_last;
        for (uint32_t x = cmd.slice_first; x <= cmd.slice_last; ++x)
          atomicAdd(&t.part_remaining[d * kReadyWordsPerId + ready_word(0, part.proj, x)], 1u);
        t.cmds[n.commands + c] = cmd;
      }
      n.commands += chunks;
      mine += chunks;
      n.bytes_read += uint64_t(part.blocks) << s.lba_shift;
    }
    if (lane == 0) {
      ex[d].part_count = p1 - p0;
      ex[d].bytes = s.packed[key];
      ex[d].failed = 0;
      ex[d].ready = fault || pending ? 0u : token;
      t.remaining[d] = mine;
    }
    n.faults += fault;
  }
  return n;
}

// Phase 7 (warp): the readiness words of the projections no read is pending for (cache hits, parts
// the expert lacks); the pump sets the others as their last read ends. After an error (no reads),
// every word of the fetch's ids, so that no consumer waits for reads that were never issued.
__device__ void publish_ready_parts(const FetchTable& t, uint32_t n_ids, uint32_t token, bool error) {
  __syncwarp();  // lane 0's counters (write_reads) before the lanes read them
  __threadfence();  // the result and the experts' table before any word that says they are there
  for (uint32_t i = threadIdx.x & 31u; i < n_ids * kReadyWordsPerId; i += 32) {
    const uint32_t k = i / kReadyWordsPerId, word = i % kReadyWordsPerId;
    if (error || t.part_remaining[t.selection[k] * kReadyWordsPerId + word] == 0)
      *const_cast<volatile uint32_t*>(&t.part_ready[i]) = token;
  }
}

// Bytes the reads of expert `key` transfer.
__device__ uint64_t read_bytes(const GpuFetcherState& s, uint64_t key) {
  uint64_t b = 0;
  for (uint32_t p = s.part_first[key]; p < s.part_first[key + 1]; ++p) b += uint64_t(s.parts[p].blocks) << s.lba_shift;
  return b;
}

// Phase 2b (lane 0): the last prefetch's reads are counted once: an expert it read that the demand
// fetch of its layer selects (`count` experts, already selected) is a prefetch hit; any other read was
// in vain (all of them when the next fetch is another layer's, or another prefetch: layer ~0u).
__device__ void settle_prefetch(GpuFetcherState& s, uint32_t layer, uint32_t count) {
  FetchTable& p = s.table[s.latest_prefetch];
  if (!p.unsettled) return;
  p.unsettled = 0;
  s.metrics.prefetch_unsettled = 0;
  const GpuFetchResult* r = p.result;
  if (r->error != fetch_error::kNone) return;
  for (uint32_t d = 0; d < r->count; ++d) {
    const GpuFetchedExpert& e = p.experts[d];
    if (e.hit || e.failed) continue;
    if (r->layer == layer && selects(s.table[kDemand], count, e.expert)) {
      s.metrics.prefetch_hits += 1;
    } else {
      s.metrics.prefetch_wasted += 1;
      s.metrics.prefetch_wasted_bytes += read_bytes(s, uint64_t(r->layer) * s.n_experts + e.expert);
    }
  }
}

// Phase 6 (lane 0): the result header and the metrics.
__device__ void finish_fetch(GpuFetcherState& s, FetchTable& t, uint32_t which, uint32_t count, const FetchCounts& n,
                             bool steady) {
  GpuFetchResult* r = t.result;
  r->count = count;
  r->commands = n.commands;
  t.ncmds = n.commands;
  if (which != kDemand) {
    s.metrics.prefetches += 1;
    s.metrics.prefetch_reads += n.faults;
    s.metrics.prefetch_bytes += n.bytes_read;
    s.metrics.prefetch_unsettled = n.faults;
    t.unsettled = 1;
  } else {
    s.metrics.tokens += 1;
    s.metrics.requested += count;
    s.metrics.faults += n.faults;
    s.metrics.hits += count - n.faults;
    s.metrics.bytes_read += n.bytes_read;
    s.metrics.last_faults = n.faults;
    if (steady) {
      s.metrics.steady_tokens += 1;
      s.metrics.steady_faults += n.faults;
    }
  }
  __threadfence();
}

// One warp: selection, cache placement, result and the reads of this fetch (which: kDemand, or a
// prefetch table: the same rules into the prefetch's own tables; the caller orders them, see launch()).
__global__ void place_experts(GpuFetcherState* S, uint32_t which, uint32_t layer, const uint32_t* ids, uint32_t n_ids) {
  GpuFetcherState& s = *S;
  FetchTable& t = s.table[which];
  const uint32_t lane = threadIdx.x & 31u;
  GpuFetchResult* r = t.result;
  __shared__ uint32_t count, error, token;
  __shared__ unsigned long long fetch_start;
  __shared__ bool steady;
  if (lane == 0) {
    forget_failed_reads(s, s.table[kDemand]);
    // A concurrent prefetch may still be reading while a demand fetch is placed: its failures are
    // known only at the next prefetch, which starts after its reads (a hit on one is failed by the pump).
    if (which != kDemand || !s.concurrent_prefetch)
      for (uint32_t i = kPrefetch; i < kTables; ++i) forget_failed_reads(s, s.table[i]);
    if (which != kDemand) {
      settle_prefetch(s, ~0u, 0);  // a prefetch no demand fetch followed
      s.latest_prefetch = which;
      t.behind_token = s.concurrent_prefetch ? s.table[kDemand].result->token : 0;
    }
    token = r->token + 1;
    r->token = token;
    r->layer = layer;
    t.n_ids = n_ids;
  }
  __syncwarp();
  uint32_t selected = 0, error_value = 0;
  const uint32_t selection_error = select_experts(s, t, layer, ids, n_ids, selected, error_value);
  __syncwarp();  // every lane's entries before lane 0 reads them
  if (lane == 0) {
    count = selected;
    error = selection_error;
    r->error_value = error_value;
    r->error = error;
    t.failures_checked = 0;
    if (which == kDemand && error == fetch_error::kNone) settle_prefetch(s, layer, count);
    steady = s.warmup_tokens > 0 ? s.metrics.tokens >= s.warmup_tokens
                                 : (s.capacity == 0 || s.resident == s.capacity);
    fetch_start = s.clock;
    if (error == fetch_error::kNone && s.capacity > 0) touch_hits(s, t, layer, count);
    if (error == fetch_error::kNone && which == kDemand) mark_pending_hits(s, t, layer, count);
    if (error == fetch_error::kNone && which == kDemand) cut_wrong_prefetch(s, t, layer, count);
  }
  __syncwarp();
  if (error != fetch_error::kNone) {
    if (lane == 0) {
      r->count = 0;
      r->commands = 0;
      t.ncmds = 0;
    }
    publish_ready_parts(t, n_ids, token, true);
    return;
  }
  place_faults(s, t, layer, count, fetch_start);
  const FetchCounts n = write_reads(s, t, layer, count, token);
  if (lane == 0) finish_fetch(s, t, which, count, n, steady);
  publish_ready_parts(t, n_ids, token, false);
  if (lane == 0 && which == kDemand) s.reads_t0 = device::global_timer_ns();
}

// A read of the fetch ended (success or final error): the last read of a slice of its projection sets
// that slice's readiness word of every routing id naming its expert, the last of its expert the
// expert's `ready` word (unless a read of it failed).
__device__ void read_ended(const FetchTable& t, const FetchCmd& c, nvme::Status st, uint32_t token) {
  GpuFetchedExpert& e = t.experts[c.sel];
  if (!st.ok()) atomicCAS(&e.failed, 0u, uint32_t(st.field) | 0x10000u);
  uint32_t done_slices = 0;  // bit x: slice x of the part has no read left
  for (uint32_t x = c.slice_first; x <= c.slice_last; ++x)
    if (atomicSub(&t.part_remaining[c.sel * kReadyWordsPerId + ready_word(0, c.proj, x)], 1u) == 1u) done_slices |= 1u << x;
  const bool expert_done = atomicSub(&t.remaining[c.sel], 1u) == 1u;
  if (done_slices == 0 && !expert_done) return;
  __threadfence_system();  // the bytes and the failed flag before a word that says they are there
  for (uint32_t k = 0; done_slices != 0 && k < t.n_ids; ++k)
    if (t.selection[k] == c.sel)
      for (uint32_t x = c.slice_first; x <= c.slice_last; ++x)
        if (done_slices & (1u << x)) *const_cast<volatile uint32_t*>(&t.part_ready[ready_word(k, c.proj, x)]) = token;
  if (expert_done && *const_cast<volatile uint32_t*>(&e.failed) == 0) *const_cast<volatile uint32_t*>(&e.ready) = token;
}

// The demand pump's extra warp (concurrent prefetches): each pending hit waits for the prefetch's reads
// of its expert to end, then takes their outcome and publishes the expert's words. Bounded: every
// prefetch read ends (the pump's timeout fails the ones that do not), and no later prefetch reuses
// the prefetch's table before this pump is done (it waits for it: GpuExpertFetcher::launch).
__device__ void publish_pending_hits(FetchTable& t, const FetchTable& p) {
  if ((threadIdx.x & 31u) != 0) return;
  const uint32_t token = t.result->token, ptoken = p.result->token;
  for (uint32_t d = 0; d < t.result->count; ++d) {
    GpuFetchedExpert& e = t.experts[d];
    if (e.pending == 0) continue;
    const GpuFetchedExpert& pe = p.experts[e.pending - 1];
    uint32_t failed = 0;
    for (;;) {
      failed = *const_cast<const volatile uint32_t*>(&pe.failed);
      if (failed || *const_cast<const volatile uint32_t*>(&pe.ready) == ptoken) break;
      __nanosleep(2000);
    }
    *const_cast<volatile uint32_t*>(&e.failed) = failed;
    __threadfence_system();  // the slot's bytes (the prefetch's reads) and `failed` before the words
    for (uint32_t k = 0; k < t.n_ids; ++k)
      if (t.selection[k] == d)
        for (uint32_t w = 0; w < kReadyWordsPerId; ++w) *const_cast<volatile uint32_t*>(&t.part_ready[k * kReadyWordsPerId + w]) = token;
    if (!failed) *const_cast<volatile uint32_t*>(&e.ready) = token;
  }
}

// A concurrent prefetch's warp, before its first read: waits until the demand fetch placed before it
// (token `demand`) has at most gate_reads reads not ended: its last round, one read per queue. Then
// the prefetch's reads queue behind the demand's at the drive: they neither delay the demand (the
// consumer waits for it) nor leave the drive idle after it (a round of reads is more than the drive's
// bandwidth-delay product). Gating once the demand had all its reads issued (a whole window left)
// shared the drive with the demand's last 8 MB: measured on Qwen3-30B-A3B at pcie5, 89-90 % against
// 90-91 % with one read per queue (docs/performance.md, session 13). Bounded: the demand's reads all
// end; a later demand fetch (another token) releases it too.
__device__ void queue_behind_demand(const GpuFetcherState& s, uint32_t demand) {
  if ((threadIdx.x & 31u) == 0) {
    const FetchTable& d = s.table[kDemand];
    for (;;) {
      if (*const_cast<const volatile uint32_t*>(&d.result->token) != demand) break;
      const uint32_t n = *const_cast<const volatile uint32_t*>(&d.result->count);
      uint32_t left = 0;
      for (uint32_t i = 0; i < n && i < s.max_experts; ++i) left += *const_cast<const volatile uint32_t*>(&d.remaining[i]);
      if (left <= s.gate_reads) break;
      __nanosleep(1000);
    }
  }
  __syncwarp();
}

// One warp per queue: the reads placed above, each ending in read_ended(); at most `depth` in flight
// per queue (0: the launch's depth). Queue w takes reads w, w + queues, ...: with a small depth the
// queues move through the list side by side, so the reads end roughly in the list's order.
__global__ void pump_fetch(TicketLaunch launch, GpuFetcherState* S, uint32_t which, device::DeviceBuffer dst,
                           uint32_t depth) {
  if (depth != 0 && (launch.depth == 0 || depth < launch.depth)) launch.depth = depth;  // launch: 0 = the ring's
  const uint32_t w = blockIdx.x;
  if (w >= launch.queue_count) {  // the extra warp of a demand fetch beside a concurrent prefetch
    FetchTable& d = S->table[kDemand];
    if (w == launch.queue_count && which == kDemand && d.pending_from < kTables) publish_pending_hits(d, S->table[d.pending_from]);
    return;
  }
  const FetchTable* t = &S->table[which];
  if (which != kDemand && t->behind_token != 0) queue_behind_demand(*S, t->behind_token);
  const uint32_t count = *const_cast<volatile uint32_t*>(&t->ncmds);
  const uint32_t token = t->result->token;
  const FetchCmd* cmds = t->cmds;
  const device::DeviceQueue qc = launch.queues[w];
  pump_ticket(
      launch, w, count,
      [&](uint64_t g, uint16_t cid) {
        const FetchCmd c = cmds[g];
        // A read of an expert cut_wrong_prefetch dropped: one block, so the command still ends (and
        // counts) in the ticket while the drive moves almost nothing for it. The command itself shrinks,
        // so a re-issue (retry, reset) neither reads the rest nor counts the bytes spared twice.
        const bool cut = which != kDemand && (*const_cast<const volatile uint32_t*>(&t->experts[c.sel].failed) & kCutRead);
        if (cut && c.blocks > 1) {
          t->cmds[g].blocks = 1;
          atomicAdd(&S->metrics.prefetch_cut_bytes, static_cast<unsigned long long>(c.blocks - 1) << qc.lba_shift);
        }
        const uint32_t blocks = cut ? 1u : c.blocks;
        nvme::PrpPair p;
        device::prps_for(qc, cid, dst, c.dst, uint64_t(blocks) << qc.lba_shift, &p);
        return nvme::make_read(qc.nsid, c.lba, blocks, p.prp1, p.prp2);
      },
      [&](uint64_t g, nvme::Status st) { read_ended(*t, cmds[g], st, token); });
}

// Stall of a demand fetch on its stream: from the kernel before it (routing done) to its reads done.
__global__ void stall_begin(GpuFetcherState* S) { S->stall_t0 = device::global_timer_ns(); }
__global__ void stall_end(GpuFetcherState* S, uint32_t layer) {
  const unsigned long long now = device::global_timer_ns();
  S->reads_end = now;
  S->reads_end_token = S->table[kDemand].result->token;
  S->stall_ns[layer] += now - S->stall_t0;
  if (S->reads_t0 >= S->stall_t0) S->read_ns[layer] += now - S->reads_t0;  // not after a failed placement
}

// The consumer's kernels of demand fetch `token` are done: the time since its reads ended. The
// consumer's stream waits for the readiness words, not for stall_end on the fetcher's stream, so its
// kernels may end before stall_end has run: reads_end is then an older fetch's (or 0 before the first,
// which once put the timer's epoch into the JSON), and the tail is nothing.
__global__ void consumed_clock(GpuFetcherState* S, uint32_t layer, uint32_t token) {
  const unsigned long long now = device::global_timer_ns(), end = *const_cast<volatile unsigned long long*>(&S->reads_end);
  if (*const_cast<volatile uint32_t*>(&S->reads_end_token) == token && now > end) S->tail_ns[layer] += now - end;
}

template <class T>
T* device_alloc(std::vector<void*>& owned, size_t n) {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, sizeof(T) * std::max<size_t>(n, 1)), "cudaMalloc(expert fetcher)");
  owned.push_back(p);
  return static_cast<T*>(p);
}

template <class T>
T* device_copy(std::vector<void*>& owned, const std::vector<T>& v) {
  T* p = device_alloc<T>(owned, v.size());
  if (!v.empty()) check_cuda(cudaMemcpy(p, v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice), "cudaMemcpy(expert fetcher)");
  return p;
}

}  // namespace

GpuExpertFetcher::GpuExpertFetcher(host::Controller& controller, GpuSubmitter& submitter, ExpertCatalog catalog,
                                   const FetcherOptions& options, GpuSubmitter* prefetch_submitter)
    : controller_(controller), submitter_(submitter), pf_submitter_(prefetch_submitter), catalog_(std::move(catalog)),
      options_(options) {
  const auto& ns = controller.namespace_info(options_.nsid);
  lba_bytes_ = ns.lba_bytes;
  page_ = controller.page_bytes();
  ExpertLayoutSpec spec;
  spec.lba_bytes = lba_bytes_;
  spec.namespace_blocks = ns.blocks;
  spec.page = page_;
  spec.max_experts_per_fetch = options_.max_experts_per_fetch;
  spec.cache_bytes = options_.cache_bytes;
  spec.min_cache_experts = options_.min_cache_experts;
  spec.max_parts = kMaxExpertParts;
  spec.max_part_blocks = 0xFFFFFFFFull;  // GpuPart::blocks
  // Validation, packing and sizing exactly as the CPU fetcher (expert_layout.h).
  const ExpertLayout layout(catalog_, spec, "GPU expert fetcher");
  expert_bytes_ = layout.slot_bytes();
  capacity_ = layout.capacity();
  uint32_t max_blocks = std::min(command_block_limit(controller, options_.nsid, options_.max_command_bytes),
                                 submitter.queues().max_blocks_per_command());
  if (pf_submitter_) max_blocks = std::min(max_blocks, pf_submitter_->queues().max_blocks_per_command());
  // Tables: every (layer, expert)'s parts at the layout's offsets.
  std::vector<uint32_t> part_first(1, 0);
  std::vector<GpuPart> parts;
  std::vector<uint64_t> packed(catalog_.parts.size(), 0);
  slices_.assign(size_t(catalog_.n_layers) * kProjectionWords, 1);
  uint64_t max_cmds_per_expert = 0;
  for (size_t k = 0; k < catalog_.parts.size(); ++k) {
    const auto& ps = catalog_.parts[k];
    uint64_t cmds = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      GpuPart g;
      g.lba = ps[i].extent.first_lba;
      g.blocks = uint32_t(ps[i].extent.lba_count);
      g.dest_rel = layout.part_offset(k, i);
      g.proj = uint32_t(ps[i].proj);
      if (g.proj >= kProjectionWords) throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: an expert part of an unknown projection");
      g.byte_in_first = ps[i].extent.byte_in_first;
      g.bytes = ps[i].extent.byte_length;
      parts.push_back(g);
      cmds += (g.blocks + max_blocks - 1) / max_blocks;
      uint32_t& sl = slices_[size_t(k / catalog_.n_experts) * kProjectionWords + g.proj];
      sl = std::max(sl, stream::part_slices(g.bytes));
    }
    part_first.push_back(uint32_t(parts.size()));
    packed[k] = layout.packed_bytes(k);
    max_cmds_per_expert = std::max(max_cmds_per_expert, cmds);
  }
  const uint64_t scratch_bytes = layout.scratch_bytes();
  const uint64_t max_cmds = max_cmds_per_expert * options_.max_experts_per_fetch;
  if (max_cmds > 0xFFFFFFFFull) throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: too many reads per fetch");
  max_commands_ = uint32_t(max_cmds);
  max_blocks_ = max_blocks;
  if (options_.read_window_bytes != 0) {
    auto depth = [&](const GpuSubmitter& sub) {
      const uint64_t per_round = uint64_t(sub.queue_count()) * max_blocks * lba_bytes_;  // one read per queue
      return uint32_t(std::clamp<uint64_t>((options_.read_window_bytes + per_round - 1) / per_round, 1, 1u << 16));
    };
    read_depth_ = depth(submitter);
    pf_read_depth_ = pf_submitter_ ? depth(*pf_submitter_) : read_depth_;
  }
  host::DmaOptions mem{host::HugePages::kAuto};
  mem.gpu_mapped = true;
  scratch_ = host::DmaBuffer(controller.transport(), scratch_bytes, mem);
  scratch_map_ = std::make_unique<device::DeviceBufferMap>(scratch_, page_);

  GpuFetcherState st;
  st.n_layers = catalog_.n_layers;
  st.n_experts = catalog_.n_experts;
  st.max_experts = options_.max_experts_per_fetch;
  st.capacity = capacity_;
  st.max_commands = max_commands_;
  st.lba_shift = uint32_t(__builtin_ctz(lba_bytes_));
  st.max_blocks = max_blocks;
  st.warmup_tokens = options_.warmup_tokens;
  st.expert_stride = expert_bytes_;
  st.concurrent_prefetch = pf_submitter_ ? 1 : 0;
  st.cut_wrong = pf_submitter_ && options_.cut_wrong_prefetches ? 1 : 0;
  st.gate_reads = read_depth_ ? submitter.queue_count() : ~0u;  // queue_behind_demand
  st.part_first = device_copy(allocations_, part_first);
  st.parts = device_copy(allocations_, parts);
  st.packed = device_copy(allocations_, packed);
  st.where = device_copy(allocations_, std::vector<int32_t>(catalog_.parts.size(), -1));
  st.slot_key = device_copy(allocations_, std::vector<long long>(capacity_, -1));
  // The empty cache's touch clock, as the policy object defines it (expert_cache_policy.h).
  const std::vector<uint64_t> used0 = ExpertCachePolicy::initial_slot_used(capacity_);
  st.slot_used = device_copy(allocations_, std::vector<unsigned long long>(used0.begin(), used0.end()));
  st.clock = ExpertCachePolicy::initial_clock(capacity_);
  const size_t result_bytes = sizeof(GpuFetchResult) + sizeof(GpuFetchedExpert) * options_.max_experts_per_fetch;
  for (FetchTable& t : st.table) {
    char* res = device_alloc<char>(allocations_, result_bytes);
    check_cuda(cudaMemset(res, 0, result_bytes), "cudaMemset(fetch result)");
    t.result = reinterpret_cast<GpuFetchResult*>(res);
    t.experts = reinterpret_cast<GpuFetchedExpert*>(res + sizeof(GpuFetchResult));
    t.selection = device_alloc<uint32_t>(allocations_, max_ids_);
    t.cmds = device_alloc<FetchCmd>(allocations_, max_commands_);
    t.remaining = device_alloc<uint32_t>(allocations_, options_.max_experts_per_fetch);
    t.part_remaining = device_alloc<uint32_t>(allocations_, size_t(options_.max_experts_per_fetch) * kReadyWordsPerId);
    t.part_ready = device_alloc<uint32_t>(allocations_, size_t(max_ids_) * kReadyWordsPerId);
    check_cuda(cudaMemset(t.part_ready, 0, sizeof(uint32_t) * max_ids_ * kReadyWordsPerId), "cudaMemset(part readiness)");
  }
  part_ready_ = st.table[kDemand].part_ready;
  open_overlap();
  st.stall_ns = device_copy(allocations_, std::vector<unsigned long long>(catalog_.n_layers, 0));
  st.read_ns = device_copy(allocations_, std::vector<unsigned long long>(catalog_.n_layers, 0));
  st.tail_ns = device_copy(allocations_, std::vector<unsigned long long>(catalog_.n_layers, 0));
  result_ = st.table[kDemand].result;
  experts_ = st.table[kDemand].experts;
  selection_ = st.table[kDemand].selection;
  for (void** e : {&chain_, &placed_, &pf_done_}) {
    cudaEvent_t ev = nullptr;
    check_cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate(expert fetcher)");
    *e = ev;
  }
  state_ = device_alloc<GpuFetcherState>(allocations_, 1);
  check_cuda(cudaMemcpy(state_, &st, sizeof(st), cudaMemcpyHostToDevice), "cudaMemcpy(expert fetcher state)");
}

GpuExpertFetcher::~GpuExpertFetcher() {
  // Reads must not land in a freed scratchpad: drain what is still in flight.
  for (const auto& [sub, t] : tickets_) {
    try {
      sub->wait(t);
    } catch (...) {
    }
  }
  cudaDeviceSynchronize();
  for (void* e : {chain_, placed_, pf_done_})
    if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  if (routed_) cudaEventDestroy(static_cast<cudaEvent_t>(routed_));
  if (stream_) cudaStreamDestroy(cu(stream_));
  for (void* p : allocations_) cudaFree(p);
}

void GpuExpertFetcher::retire_done(bool block, size_t keep) {
  while (tickets_.size() > keep && (block || tickets_.front().first->done(tickets_.front().second))) {
    const auto [sub, t] = tickets_.front();
    tickets_.pop_front();
    try {
      sub->wait(t);
    } catch (...) {
      if (!pending_error_) pending_error_ = std::current_exception();
    }
  }
}

void GpuExpertFetcher::check_request(uint32_t layer, uint32_t n_ids) const {
  if (n_ids > max_ids_)
    throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: " + std::to_string(n_ids) +
                                                 " routing ids in one fetch; at most " + std::to_string(max_ids_));
  if (layer >= catalog_.n_layers)
    throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: layer " + std::to_string(layer) +
                                                 " has no experts (" + std::to_string(catalog_.n_layers) + " layers)");
}

// Place and pump kernels of one fetch or prefetch on `stream`. The place kernels run one at a time
// in host order (one LRU state); a pump owns its queues until its reads end. With one submitter
// every fetch and prefetch waits for the previous one's reads (the chain). With a prefetch
// submitter (concurrent prefetches) a demand fetch waits only for the previous demand's reads and
// the latest placement: it starts its reads while a prefetch still reads, and its hits on experts
// not yet in are published by its pump's extra warp (publish_pending_hits). A prefetch waits for the
// demand's placement and the previous prefetch's reads (its victims and failed reads are then
// settled), and its pump for the demand's reads to be all issued (queue_behind_demand); it takes
// the other prefetch table, which the demand's pump may still read. Why no victim is being read: a
// demand never evicts the running prefetch's slots (the most recently placed; with a cache of >= 2
// fetches the older slots suffice), and a prefetch never evicts the demand's slots (the most
// recently used, same reason) nor the previous prefetch's before its reads ended.
void GpuExpertFetcher::launch(uint32_t which, uint32_t layer, const uint32_t* device_ids, uint32_t n_ids,
                              cuda_stream_t stream) {
  retire_done(false);
  // The submitters hold a bounded number of tickets (a batched pass enqueues a fetch per token and
  // layer): past half of them the host waits for the oldest.
  retire_done(true, kMaxOutstanding - 1);
  const bool concurrent = pf_submitter_ != nullptr;
  const bool own_queues = concurrent && which != kDemand;
  GpuSubmitter& sub = own_queues ? *pf_submitter_ : submitter_;
  auto wait_for = [&](void* e, const char* what) { check_cuda(cudaStreamWaitEvent(cu(stream), static_cast<cudaEvent_t>(e), 0), what); };
  if (own_queues) {  // after the demand's placement (its reads first: queue_behind_demand) and the last prefetch's reads
    wait_for(placed_, "GPU expert fetcher: ordering after the fetch's placement");
    wait_for(pf_done_, "GPU expert fetcher: ordering after the previous prefetch");
  } else {
    wait_for(chain_, "GPU expert fetcher: ordering after the previous fetch");
    if (concurrent) wait_for(placed_, "GPU expert fetcher: ordering after the prefetch's placement");
  }
  place_experts<<<1, 32, 0, cu(stream)>>>(state_, which, layer, device_ids, n_ids);
  check_cuda(cudaGetLastError(), "GPU expert fetcher: launching the place kernel");
  if (concurrent) check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(placed_), cu(stream)), "GPU expert fetcher: placement event");
  GpuFetcherState* state = state_;
  const device::DeviceBuffer dst = scratch_map_->get();
  const uint32_t depth = own_queues ? pf_read_depth_ : read_depth_;
  const uint32_t extra = concurrent && which == kDemand ? 1 : 0;  // publish_pending_hits
  const uint64_t t = sub.issue_kernel(
      stream,
      [&](const TicketLaunch& l) { pump_fetch<<<l.queue_count + extra, 32, 0, cu(stream)>>>(l, state, which, dst, depth); },
      [state, layer, which](uint64_t g) {
        GpuFetcherState st;
        FetchCmd c;
        if (cudaMemcpy(&st, state, sizeof(st), cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(&c, st.table[which].cmds + g, sizeof(c), cudaMemcpyDeviceToHost) != cudaSuccess)
          return std::string("expert read #") + std::to_string(g);
        return std::string(which != kDemand ? "expert prefetch read #" : "expert read #") + std::to_string(g) +
               " of layer " + std::to_string(layer) + ", LBA " + std::to_string(c.lba) + ".." +
               std::to_string(c.lba + c.blocks - 1);
      });
  tickets_.emplace_back(&sub, t);
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(own_queues ? pf_done_ : chain_), cu(stream)), "GPU expert fetcher: chain event");
  if (which == kDemand) {
    ++demand_token_;
    last_ids_ = n_ids;
    last_layer_ = layer;
  }
}

void GpuExpertFetcher::fetch(uint32_t layer, const uint32_t* device_ids, uint32_t n_ids, cuda_stream_t stream) {
  check_request(layer, n_ids);
  // The stall clock starts before the wait on the chain: time waiting for a prefetch counts.
  stall_begin<<<1, 1, 0, cu(stream)>>>(state_);
  launch(kDemand, layer, device_ids, n_ids, stream);
  stall_end<<<1, 1, 0, cu(stream)>>>(state_, layer);
  check_cuda(cudaGetLastError(), "GPU expert fetcher: launching the stall clock");
}

// The overlapped fetch's own stream (highest priority: its pump warps start before the consumer's
// expert kernels fill the GPU) and the driver's stream wait on a memory word, looked up once: where
// the driver lacks it, can_overlap() says so and fetch_overlapped() refuses.
void GpuExpertFetcher::open_overlap() {
  int lo = 0, hi = 0;
  check_cuda(cudaDeviceGetStreamPriorityRange(&lo, &hi), "GPU expert fetcher: stream priorities");
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, hi), "GPU expert fetcher: its stream");
  stream_ = reinterpret_cast<cuda_stream_t>(s);
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate(expert fetcher)");
  routed_ = e;
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess)
    wait_value_ = fn;
  cudaGetLastError();  // a failed lookup is an answer, not an error for the next call to find
}

void GpuExpertFetcher::fetch_overlapped(uint32_t layer, const uint32_t* device_ids, uint32_t n_ids,
                                        cuda_stream_t consumer) {
  if (!can_overlap())
    throw Error(ErrorKind::kUnsupported, "GPU expert fetcher: the CUDA driver has no cuStreamWaitValue32, which an "
                                         "overlapped fetch needs; use fetch() (the reads end before the consumer runs)");
  check_request(layer, n_ids);
  cudaEvent_t routed = static_cast<cudaEvent_t>(routed_);
  // After the consumer's work so far: its routing, and its kernels of the previous fetch, which read
  // the result tables and scratchpad slots that this fetch may now reuse.
  check_cuda(cudaEventRecord(routed, cu(consumer)), "GPU expert fetcher: routing event");
  check_cuda(cudaStreamWaitEvent(cu(stream_), routed, 0), "GPU expert fetcher: waiting for the routing");
  stall_begin<<<1, 1, 0, cu(stream_)>>>(state_);
  launch(kDemand, layer, device_ids, n_ids, stream_);
  stall_end<<<1, 1, 0, cu(stream_)>>>(state_, layer);
  check_cuda(cudaGetLastError(), "GPU expert fetcher: launching the stall clock");
}

uint32_t GpuExpertFetcher::part_slices(model::Projection proj) const {
  if (uint32_t(proj) >= kProjectionWords) return 1;
  return slices_[size_t(last_layer_) * kProjectionWords + uint32_t(proj)];
}

void GpuExpertFetcher::wait_part(uint32_t k, model::Projection proj, cuda_stream_t consumer) {
  const uint32_t n = part_slices(proj);
  for (uint32_t x = 0; x < n; ++x) wait_slice(k, proj, x, consumer);
}

void GpuExpertFetcher::wait_slice(uint32_t k, model::Projection proj, uint32_t slice, cuda_stream_t consumer) {
  if (!can_overlap()) throw Error(ErrorKind::kUnsupported, "GPU expert fetcher: wait_part() needs an overlapped fetch");
  if (k >= last_ids_ || uint32_t(proj) >= kProjectionWords || slice >= kMaxPartSlices)
    throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: wait_part(" + std::to_string(k) + ", " +
                                                 std::to_string(uint32_t(proj)) + ", slice " + std::to_string(slice) +
                                                 ") names no part of the last fetch (" + std::to_string(last_ids_) +
                                                 " routing ids, " + std::to_string(kMaxPartSlices) + " slices at most)");
  using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  const auto wait = reinterpret_cast<WaitValue32>(wait_value_);
  const uint32_t* word = part_ready_ + ready_word(k, uint32_t(proj), slice);
  // The front end waits, no SM spins: bounded, as every read ends (the pump's timeout fails the rest).
  const CUresult r = wait(reinterpret_cast<CUstream>(consumer), reinterpret_cast<CUdeviceptr>(word), demand_token_,
                          CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS)
    throw Error(ErrorKind::kIo, "GPU expert fetcher: cuStreamWaitValue32 failed (CUresult " + std::to_string(int(r)) + ")");
}

void GpuExpertFetcher::consumed(uint32_t layer, cuda_stream_t consumer) {
  check_request(layer, 0);
  consumed_clock<<<1, 1, 0, cu(consumer)>>>(state_, layer, demand_token_);
  check_cuda(cudaGetLastError(), "GPU expert fetcher: launching the tail clock");
}

void GpuExpertFetcher::prefetch(uint32_t layer, const uint32_t* device_ids, uint32_t n_ids, cuda_stream_t stream) {
  if (!can_prefetch())
    throw Error(ErrorKind::kInvalidArgument,
                "GPU expert fetcher: a prefetch needs a cache of at least 2 fetches (" +
                    std::to_string(2 * options_.max_experts_per_fetch) + " experts); the cache holds " +
                    std::to_string(capacity_) + ": raise cache_bytes, or do not prefetch");
  check_request(layer, n_ids);
  // Concurrent prefetches alternate between two tables (the previous one may still be read by the
  // pump of the fetch it served).
  if (pf_submitter_) pf_table_ = pf_table_ == kPrefetch ? kPrefetch + 1 : kPrefetch;
  launch(pf_table_, layer, device_ids, n_ids, stream);
}

std::vector<FetchedExpert> GpuExpertFetcher::wait() {
  retire_done(true);
  if (pending_error_) {
    std::exception_ptr e = pending_error_;
    pending_error_ = nullptr;
    std::rethrow_exception(e);
  }
  GpuFetchResult r;
  check_cuda(cudaMemcpy(&r, result_, sizeof(r), cudaMemcpyDeviceToHost), "cudaMemcpy(fetch result)");
  if (r.error != fetch_error::kNone) {
    const char* what = r.error == fetch_error::kBadExpertId ? "is not an expert of this model"
                       : r.error == fetch_error::kTooMany  ? "is one distinct expert more than max_experts_per_fetch"
                                                           : "has no slices in the model";
    throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: routing id " + std::to_string(r.error_value) +
                                                 " of layer " + std::to_string(r.layer) + " " + what +
                                                 " (" + std::to_string(catalog_.n_experts) + " experts per layer, " +
                                                 std::to_string(options_.max_experts_per_fetch) + " per fetch); nothing was read");
  }
  std::vector<GpuFetchedExpert> ex(r.count);
  if (r.count)
    check_cuda(cudaMemcpy(ex.data(), experts_, sizeof(GpuFetchedExpert) * r.count, cudaMemcpyDeviceToHost),
               "cudaMemcpy(fetched experts)");
  std::vector<FetchedExpert> out;
  for (const GpuFetchedExpert& e : ex) {
    FetchedExpert f;
    f.expert = e.expert;
    f.offset = e.offset;
    f.bytes = e.bytes;
    f.hit = e.hit != 0;
    for (uint32_t k = 0; k < e.part_count; ++k)
      f.parts.push_back(FetchedPart{model::Projection(e.part_proj[k]), e.part_offset[k], e.part_bytes[k]});
    out.push_back(std::move(f));
  }
  return out;
}

GpuFetcherState GpuExpertFetcher::read_state(const char* what) const {
  check_cuda(cudaDeviceSynchronize(), what);
  GpuFetcherState st;
  check_cuda(cudaMemcpy(&st, state_, sizeof(st), cudaMemcpyDeviceToHost), "cudaMemcpy(fetch state)");
  return st;
}

FetcherMetrics GpuExpertFetcher::metrics() const {
  const GpuFetcherState st = read_state("expert fetcher metrics");
  FetcherMetrics m;
  m.tokens = st.metrics.tokens;
  m.requested = st.metrics.requested;
  m.faults = st.metrics.faults;
  m.hits = st.metrics.hits;
  m.bytes_read = st.metrics.bytes_read;
  m.last_faults = st.metrics.last_faults;
  m.steady_tokens = st.metrics.steady_tokens;
  m.steady_faults = st.metrics.steady_faults;
  return m;
}

PrefetchMetrics GpuExpertFetcher::prefetch_metrics() const {
  const GpuFetcherState st = read_state("expert fetcher metrics");
  PrefetchMetrics m;
  m.prefetches = st.metrics.prefetches;
  m.reads = st.metrics.prefetch_reads;
  // Placement counts each expert's whole bytes (read or wasted) before any cut; the cut bytes were
  // wasted ones (only experts the fetch did not select are cut) that the drive never moved.
  const unsigned long long spared = st.metrics.prefetch_cut_bytes;
  m.cut_bytes = spared;
  m.bytes_read = st.metrics.prefetch_bytes - std::min(spared, st.metrics.prefetch_bytes);
  m.hits = st.metrics.prefetch_hits;
  m.wasted = st.metrics.prefetch_wasted;
  m.wasted_bytes = st.metrics.prefetch_wasted_bytes - std::min(spared, st.metrics.prefetch_wasted_bytes);
  m.unsettled = st.metrics.prefetch_unsettled;
  m.cut = st.metrics.prefetch_cut;
  std::vector<unsigned long long> ns(catalog_.n_layers);
  check_cuda(cudaMemcpy(ns.data(), st.stall_ns, sizeof(unsigned long long) * ns.size(), cudaMemcpyDeviceToHost),
             "cudaMemcpy(stall clock)");
  for (unsigned long long v : ns) m.stall_seconds.push_back(double(v) * 1e-9);
  check_cuda(cudaMemcpy(ns.data(), st.read_ns, sizeof(unsigned long long) * ns.size(), cudaMemcpyDeviceToHost),
             "cudaMemcpy(read clock)");
  for (unsigned long long v : ns) m.read_seconds.push_back(double(v) * 1e-9);
  check_cuda(cudaMemcpy(ns.data(), st.tail_ns, sizeof(unsigned long long) * ns.size(), cudaMemcpyDeviceToHost),
             "cudaMemcpy(tail clock)");
  for (unsigned long long v : ns) m.tail_seconds.push_back(double(v) * 1e-9);
  return m;
}

std::vector<uint32_t> GpuExpertFetcher::resident_per_layer() const {
  const GpuFetcherState st = read_state("expert fetcher residency");
  std::vector<int32_t> where(catalog_.parts.size());
  check_cuda(cudaMemcpy(where.data(), st.where, sizeof(int32_t) * where.size(), cudaMemcpyDeviceToHost),
             "cudaMemcpy(cache table)");
  std::vector<uint32_t> out(catalog_.n_layers, 0);
  for (size_t k = 0; k < where.size(); ++k)
    if (where[k] >= 0) out[k / catalog_.n_experts] += 1;
  return out;
}

}  // namespace gpunvme::stream
