// The GPU expert fetcher's tables (gpu_fetcher_state.h): the catalog's parts as the place kernel reads
// them, built on the host from the layout the CPU fetcher also uses (expert_layout.h), then uploaded
// with the empty cache, the per-fetch tables and the clocks into device memory that one arena owns.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/stream/cuda_owned.h"
#include "runtime/stream/expert_fetcher.h"
#include "runtime/stream/expert_layout.h"
#include "runtime/stream/gpu_fetcher_state.h"

namespace gpunvme::stream {

struct FetcherPartTables {
  std::vector<uint32_t> part_first;   // [keys + 1]: each (layer, expert)'s first part
  std::vector<GpuPart> parts;
  std::vector<uint64_t> packed;       // [keys]: scratchpad bytes of each expert, page rounded
  std::vector<uint32_t> slices;       // [layer * kProjectionWords + proj]: the most slices of a part
  uint64_t max_cmds_per_expert = 0;   // reads of the expert that needs the most, `max_blocks` a read
};

// Every (layer, expert)'s parts at the layout's offsets; reads of at most `max_blocks` blocks.
// Throws kInvalidArgument for a part of a projection the readiness words do not have.
FetcherPartTables build_part_tables(const ExpertCatalog& catalog, const ExpertLayout& layout, uint32_t max_blocks);

// Allocates in `memory` and points `st` (its scalars set: n_layers, n_experts, max_experts, capacity,
// max_commands) at: the part tables, the empty cache (expert_cache_policy.h's touch clock), the
// fetch tables (results zeroed, readiness words 0) for `max_ids` routing ids, and the clocks.
// Returns the device copy of `st`; `st` keeps the device pointers for the host.
GpuFetcherState* upload_fetcher_state(GpuFetcherState& st, const FetcherPartTables& tables, uint32_t max_ids,
                                      DeviceArena& memory);

}  // namespace gpunvme::stream
