#include "runtime/stream/gpu_fetcher_tables.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "device/cuda_check.h"
#include "host/error.h"
#include "runtime/stream/expert_cache_policy.h"

namespace gpunvme::stream {

using device::check_cuda;

FetcherPartTables build_part_tables(const ExpertCatalog& catalog, const ExpertLayout& layout, uint32_t max_blocks) {
  FetcherPartTables t;
  t.part_first.assign(1, 0);
  t.packed.assign(catalog.parts.size(), 0);
  t.slices.assign(size_t(catalog.n_layers) * kProjectionWords, 1);
  for (size_t k = 0; k < catalog.parts.size(); ++k) {
    const auto& ps = catalog.parts[k];
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
      t.parts.push_back(g);
      cmds += (g.blocks + max_blocks - 1) / max_blocks;
      uint32_t& sl = t.slices[size_t(k / catalog.n_experts) * kProjectionWords + g.proj];
      sl = std::max(sl, stream::part_slices(g.bytes));
    }
    t.part_first.push_back(uint32_t(t.parts.size()));
    t.packed[k] = layout.packed_bytes(k);
    t.max_cmds_per_expert = std::max(t.max_cmds_per_expert, cmds);
  }
  return t;
}

GpuFetcherState* upload_fetcher_state(GpuFetcherState& st, const FetcherPartTables& tables, uint32_t max_ids,
                                      DeviceArena& memory) {
  const char* what = "expert fetcher tables";
  st.part_first = memory.copy(tables.part_first, what);
  st.parts = memory.copy(tables.parts, what);
  st.packed = memory.copy(tables.packed, what);
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
    t.cmds = memory.alloc<FetchCmd>(st.max_commands, what);
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
