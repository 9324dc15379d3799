#include "runtime/stream/gpu_fetcher_tables.h"

#include <cuda_runtime.h>

#include "device/cuda_check.h"
#include "host/error.h"
#include "runtime/stream/expert_cache_policy.h"

namespace gpunvme::stream {

using device::check_cuda;

GpuFetcherState* upload_fetcher_state(GpuFetcherState& st, const FetcherPartTables& tables, uint32_t max_ids,
                                      DeviceArena& memory) {
  const char* what = "expert fetcher tables";
  st.part_first = memory.copy(tables.part_first, what);
  st.parts = memory.copy(tables.parts, what);
  st.packed = memory.copy(tables.packed, what);
  if (!tables.pieces.empty()) {
    st.piece_first = memory.copy(tables.piece_first, what);
    st.pieces = memory.copy(tables.pieces, what);
  }
  st.where = memory.copy(std::vector<int32_t>(tables.packed.size(), -1), what);
  st.slot_key = memory.copy(std::vector<long long>(st.capacity, -1), what);
  // The empty cache's touch clock, as the policy object defines it (expert_cache_policy.h).
  const std::vector<uint64_t> used0 = ExpertCachePolicy::initial_slot_used(st.capacity);
  st.slot_used = memory.copy(std::vector<unsigned long long>(used0.begin(), used0.end()), what);
  st.clock = ExpertCachePolicy::initial_clock(st.capacity);
  const size_t result_bytes = sizeof(GpuFetchResult) + sizeof(GpuFetchedExpert) * st.max_experts;
  for (FetchTable& t : st.table) {
    char* res = memory.alloc<char>(result_bytes, what);
    check_cuda(cudaMemset(res, 0, result_bytes), "cudaMemset(fetch result)");
    t.result = reinterpret_cast<GpuFetchResult*>(res);
    t.experts = reinterpret_cast<GpuFetchedExpert*>(res + sizeof(GpuFetchResult));
    t.selection = memory.alloc<uint32_t>(max_ids, what);
    t.cmds = memory.alloc<FetchCmd>(size_t(st.max_commands) * st.members, what);  // a list per member
    t.remaining = memory.alloc<uint32_t>(st.max_experts, what);
    t.part_remaining = memory.alloc<uint32_t>(size_t(st.max_experts) * kReadyWordsPerId, what);
    t.part_ready = memory.alloc<uint32_t>(size_t(max_ids) * kReadyWordsPerId, what);
    check_cuda(cudaMemset(t.part_ready, 0, sizeof(uint32_t) * max_ids * kReadyWordsPerId), "cudaMemset(part readiness)");
  }
  const std::vector<unsigned long long> per_layer(st.n_layers, 0);
  st.stall_ns = memory.copy(per_layer, what);
  st.read_ns = memory.copy(per_layer, what);
  st.tail_ns = memory.copy(per_layer, what);
  GpuFetcherState* state = memory.alloc<GpuFetcherState>(1, what);
  check_cuda(cudaMemcpy(state, &st, sizeof(st), cudaMemcpyHostToDevice), "cudaMemcpy(expert fetcher state)");
  return state;
}

}  // namespace gpunvme::stream
