// The GPU expert fetcher's device-side state (gpu_expert_fetcher.h): the tables built once, the
// cache, and the per-fetch tables that the place kernel writes and the pump reads. Plain data, shared
// by the kernels (gpu_expert_place.cu, gpu_expert_pump.cu) and the host class that builds and reads it.
#pragma once
#include <cstdint>

#include "runtime/stream/gpu_fetch_types.h"

namespace gpunvme::stream {

// Members of a striped set the fetcher reads from (model::kMaxStripeMembers; one: a namespace).
inline constexpr uint32_t kMaxFetchMembers = 16;

// One slice of an expert, as the place kernel needs it. On a striped set `lba` and `blocks` are the
// logical volume's; the reads come from the part's pieces (GpuPiece) instead.
struct GpuPart {
  uint64_t lba = 0;
  uint64_t dest_rel = 0;      // its first block, relative to the expert's start in the scratchpad
  uint32_t blocks = 0;
  uint32_t proj = 0;
  uint32_t byte_in_first = 0;
  uint32_t pad = 0;
  uint64_t bytes = 0;
};

// A striped set's run of a part's blocks on one member (model::split_blocks): member blocks
// [lba, lba + blocks), which are the part's blocks from `block_offset` on. The part's reads are cut
// per piece, so no read crosses a stripe unit.
struct GpuPiece {
  uint64_t lba = 0;
  uint64_t block_offset = 0;
  uint32_t blocks = 0;
  uint32_t member = 0;
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
  FetchCmd* cmds = nullptr;             // [members * max_commands]: member m's reads from m * max_commands, in list order
  uint32_t* remaining = nullptr;        // [max_experts] reads not yet completed
  uint32_t* part_remaining = nullptr;   // [max_experts * kReadyWordsPerId] the same per projection and slice
  uint32_t* part_ready = nullptr;       // [max_ids * kReadyWordsPerId] per routing id (gpu_fetch_types.h ready_word)
  uint32_t n_ids = 0;                   // routing ids of the fetch (selection's entries)
  uint32_t ncmds = 0;                   // reads of all members
  uint32_t member_cmds[kMaxFetchMembers] = {};  // member m's reads (cmds + m * max_commands)
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
  // A striped set (members > 1): part p's pieces are pieces[piece_first[p] .. piece_first[p + 1]).
  uint32_t members = 1;
  const uint32_t* piece_first = nullptr;  // [parts + 1]
  const GpuPiece* pieces = nullptr;
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

// A prefetch expert whose remaining reads were cut (cut_wrong_prefetch): not an NVMe status (those
// carry 0x10000), so read_ended never sets its `ready`. Its slot leaves the cache at once but stays
// parked (never a victim: no touch clock reaches kParked) while its reads already issued still land.
inline constexpr uint32_t kCutRead = 0x20000u;
inline constexpr unsigned long long kParked = ~0ull;

}  // namespace gpunvme::stream
