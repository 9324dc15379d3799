// The GPU expert fetcher's place kernel (gpu_expert_fetcher.h, step 1 of a fetch): one warp collapses
// the routing ids into distinct experts, looks each up in the cache, picks victims for the faults and
// writes the fetch's result and reads into its table (gpu_fetcher_state.h) for the pump.
#include <cuda_runtime.h>

#include "device/warp_state.cuh"
#include "runtime/stream/gpu_fetcher_kernels.h"
#include "runtime/stream/gpu_fetcher_state.h"

namespace gpunvme::stream {

namespace {

using device::kFullMask;

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
// layer and has not finished reading is pending: its bytes are still arriving in the slot. Only in that
// slot: an expert the prefetch read but an earlier fetch of the layer cut (cut_wrong_prefetch) and a
// later one read again lies elsewhere, complete, and its prefetch entry never gets ready (several fetches
// of one layer after a prediction: a pass's tokens, one fetch each).
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
      if (pe.expert != e.expert || pe.hit || pe.offset != e.offset) continue;
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
  uint32_t member_cmds[kMaxFetchMembers] = {};  // each member's reads so far (its list in cmds)
};

// The reads of blocks [off, off + blocks) of part `part` of distinct expert `d` (at scratchpad offset
// `base`), which lie at `lba` of `member`, `max_blocks` a read, spread over the lanes, appended to
// the member's list (warp-uniform arguments). One namespace: the whole part, member 0.
__device__ uint32_t write_piece_reads(const GpuFetcherState& s, FetchTable& t, const GpuPart& part, uint64_t lba,
                                      uint64_t off, uint32_t blocks, uint32_t member, uint32_t d, uint64_t base,
                                      uint32_t at) {
  const uint32_t lane = threadIdx.x & 31u;
  const uint32_t chunks = (blocks + s.max_blocks - 1) / s.max_blocks;
  const uint64_t slice = part_slice_bytes(part.bytes);
  FetchCmd* list = t.cmds + size_t(member) * s.max_commands;
  for (uint32_t c = lane; c < chunks; c += 32) {
    const uint64_t in_piece = uint64_t(c) * s.max_blocks;
    const uint64_t b0 = off + in_piece;  // blocks into the part
    FetchCmd cmd;
    cmd.lba = lba + in_piece;
    cmd.blocks = uint32_t(min(uint64_t(s.max_blocks), uint64_t(blocks) - in_piece));
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
    list[at + c] = cmd;
  }
  return chunks;
}

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
      // Each member's reads in the consumers' order (expert by expert, part by part), so that its
      // pump warps end them in about that order too.
      uint32_t chunks = 0;
      if (s.members <= 1) {
        chunks = write_piece_reads(s, t, part, part.lba, 0, part.blocks, 0, d, base, n.member_cmds[0]);
        n.member_cmds[0] += chunks;
      } else {
        for (uint32_t q = s.piece_first[p]; q < s.piece_first[p + 1]; ++q) {
          const GpuPiece piece = s.pieces[q];
          const uint32_t c = write_piece_reads(s, t, part, piece.lba, piece.block_offset, piece.blocks, piece.member, d,
                                               base, n.member_cmds[piece.member]);
          n.member_cmds[piece.member] += c;
          chunks += c;
        }
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
  for (uint32_t m = 0; m < s.members; ++m) t.member_cmds[m] = n.member_cmds[m];
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
      for (uint32_t m = 0; m < s.members; ++m) t.member_cmds[m] = 0;
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

}  // namespace

void launch_place_experts(GpuFetcherState* state, uint32_t which, uint32_t layer, const uint32_t* ids, uint32_t n_ids,
                          cuda_stream_t stream) {
  place_experts<<<1, 32, 0, stream>>>(state, which, layer, ids, n_ids);
}

}  // namespace gpunvme::stream
