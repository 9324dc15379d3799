// The GPU expert fetcher's tables (gpu_fetcher_state.h): the catalog's parts as the place kernel reads
// them (built on the host: gpu_fetcher_parts.h), uploaded with the empty cache, the per-fetch tables
// and the clocks into device memory that one arena owns.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/stream/cuda_owned.h"
#include "runtime/stream/gpu_fetcher_parts.h"
#include "runtime/stream/gpu_fetcher_state.h"

namespace gpunvme::stream {

// Allocates in `memory` and points `st` (its scalars set: n_layers, n_experts, max_experts, capacity,
// max_commands, members) at: the part tables, the empty cache (expert_cache_policy.h's touch clock), the
// fetch tables (results zeroed, readiness words 0) for `max_ids` routing ids, and the clocks.
// Returns the device copy of `st`; `st` keeps the device pointers for the host.
GpuFetcherState* upload_fetcher_state(GpuFetcherState& st, const FetcherPartTables& tables, uint32_t max_ids,
                                      DeviceArena& memory);

}  // namespace gpunvme::stream
