// GpuExpertFetcher's metrics and residency (gpu_expert_fetcher.h): the device state copied to the
// host once every fetch so far has ended.
#include <cuda_runtime.h>

#include <algorithm>

#include "device/cuda_check.h"
#include "runtime/stream/gpu_expert_fetcher.h"
#include "runtime/stream/gpu_fetcher_state.h"

namespace gpunvme::stream {

using device::check_cuda;

namespace {

// A per-layer clock of the device state (nanoseconds), in seconds.
std::vector<double> layer_seconds(const unsigned long long* device_ns, uint32_t n_layers, const char* what) {
  std::vector<unsigned long long> ns(n_layers);
  check_cuda(cudaMemcpy(ns.data(), device_ns, sizeof(unsigned long long) * ns.size(), cudaMemcpyDeviceToHost), what);
  std::vector<double> seconds;
  for (unsigned long long v : ns) seconds.push_back(double(v) * 1e-9);
  return seconds;
}

}  // namespace

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
  m.stall_seconds = layer_seconds(st.stall_ns, catalog_.n_layers, "cudaMemcpy(stall clock)");
  m.read_seconds = layer_seconds(st.read_ns, catalog_.n_layers, "cudaMemcpy(read clock)");
  m.tail_seconds = layer_seconds(st.tail_ns, catalog_.n_layers, "cudaMemcpy(tail clock)");
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
