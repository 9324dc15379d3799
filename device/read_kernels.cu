// Read kernels (device/read.h): one warp per queue, each driving its queue with warp_pump().
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "device/read.h"
#include "device/warp_queue.cuh"
#include "host/error.h"

namespace gpunvme::device {
namespace {

__device__ __forceinline__ uint32_t warp_index() { return blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; }

// Splits extents into commands: prefix[e] = commands of extents 0..e (inclusive). One warp.
// An extent that breaks a rule (no blocks, dst not dword aligned, past the buffer) sets *bad = e + 1.
__global__ void plan_extents(const Extent* ext, uint32_t n, uint32_t max_blocks, uint32_t lba_shift, uint64_t dst_bytes,
                             uint64_t* prefix, uint64_t* total, uint32_t* bad) {
  const uint32_t lane = threadIdx.x & 31;
  uint64_t carry = 0;
  for (uint32_t base = 0; base < n; base += 32) {
    const uint32_t e = base + lane;
    uint64_t cmds = 0;
    if (e < n) {
      const Extent x = ext[e];
      const uint64_t bytes = uint64_t(x.blocks) << lba_shift;
      if (x.blocks == 0 || (x.dst_offset & 3) != 0 || x.dst_offset > dst_bytes || bytes > dst_bytes - x.dst_offset)
        atomicCAS(bad, 0u, e + 1);
      cmds = (uint64_t(x.blocks) + max_blocks - 1) / max_blocks;
    }
    uint64_t scan = cmds;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const uint64_t v = __shfl_up_sync(kFullMask, scan, d);
      if (lane >= uint32_t(d)) scan += v;
    }
    if (e < n) prefix[e] = carry + scan;
    carry += __shfl_sync(kFullMask, scan, 31);
  }
  if (lane == 0) *total = carry;
}

// Gather: selection i reads table[indices[i]] into dst_stride * i.
__global__ void select_extents(const Extent* table, uint32_t table_count, const uint32_t* indices, uint32_t n,
                               uint64_t dst_stride, Extent* out) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const uint32_t k = indices[i];
    Extent x{};
    if (k < table_count) x = table[k];  // else blocks = 0: plan_extents rejects it
    x.dst_offset = dst_stride * i;
    x.tag = i;
    out[i] = x;
  }
}

__global__ void extents_kernel(DeviceQueue* qs, uint32_t nq, const Extent* ext, const uint64_t* prefix, uint32_t n_ext,
                               uint64_t total, DeviceBuffer dst, uint32_t depth, uint64_t timeout_ns, QueueReport* out) {
  const uint32_t w = warp_index();
  if (w >= nq) return;
  DeviceQueue* q = qs + w;
  const DeviceQueue qc = *q;  // the immutable fields
  const uint64_t count = w < total ? (total - w + nq - 1) / nq : 0;
  auto make = [&](uint64_t i, uint16_t cid, uint32_t* tag) {
    const uint64_t g = w + i * nq;
    uint32_t lo = 0, hi = n_ext;  // first extent whose prefix exceeds g
    while (lo < hi) {
      const uint32_t mid = (lo + hi) / 2;
      if (prefix[mid] > g) hi = mid; else lo = mid + 1;
    }
    const uint32_t e = lo;
    const uint64_t piece = g - (e ? prefix[e - 1] : 0);
    const Extent x = ext[e];
    const uint64_t b0 = piece * qc.max_blocks;
    const uint32_t nb = uint32_t(min(uint64_t(qc.max_blocks), uint64_t(x.blocks) - b0));
    const uint64_t off = x.dst_offset + (b0 << qc.lba_shift);
    nvme::PrpPair p;
    prps_for(qc, cid, dst, off, uint64_t(nb) << qc.lba_shift, &p);
    *tag = x.tag;
    return nvme::make_read(qc.nsid, x.lba + b0, nb, p.prp1, p.prp2);
  };
  const QueueReport r = warp_pump(q, count, depth, timeout_ns, make, [](uint32_t, nvme::Status) {});
  if ((threadIdx.x & 31) == 0) out[w] = r;
}

__global__ void stream_kernel(DeviceQueue* qs, uint32_t nq, StreamSpec spec, DeviceBuffer dst, uint32_t depth,
                              uint64_t timeout_ns, QueueReport* out) {
  const uint32_t w = warp_index();
  if (w >= nq) return;
  DeviceQueue* q = qs + w;
  const DeviceQueue qc = *q;
  const uint64_t span = spec.span_blocks / spec.blocks * spec.blocks;
  const uint64_t bytes = uint64_t(spec.blocks) << qc.lba_shift;
  const uint64_t base = uint64_t(w) * spec.per_queue;
  auto make = [&](uint64_t i, uint16_t cid, uint32_t* tag) {
    const uint64_t lba = spec.first_lba + ((base + i) * spec.blocks) % span;
    const uint64_t slot = (cid & (spec.slots - 1)) + (spec.shared_dst ? 0 : uint64_t(w) * spec.slots);
    nvme::PrpPair p;
    prps_for(qc, cid, dst, slot * spec.slot_bytes, bytes, &p);
    *tag = uint32_t(i);
    return nvme::make_read(qc.nsid, lba, spec.blocks, p.prp1, p.prp2);
  };
  const QueueReport r = warp_pump(q, spec.per_queue, depth, timeout_ns, make, [](uint32_t, nvme::Status) {});
  if ((threadIdx.x & 31) == 0) out[w] = r;
}

template <class T>
struct DeviceArray {
  T* p = nullptr;
  explicit DeviceArray(size_t n) { check_cuda(cudaMalloc(reinterpret_cast<void**>(&p), sizeof(T) * std::max<size_t>(n, 1)), "cudaMalloc"); }
  ~DeviceArray() { cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
};

ReadResult collect(const DeviceArray<QueueReport>& reports, uint32_t nq, uint64_t commands) {
  ReadResult r;
  r.commands = commands;
  r.per_queue.resize(nq);
  check_cuda(cudaDeviceSynchronize(), "read kernel");
  check_cuda(cudaMemcpy(r.per_queue.data(), reports.p, sizeof(QueueReport) * nq, cudaMemcpyDeviceToHost),
             "cudaMemcpy(reports)");
  uint64_t slowest = 0;
  for (const QueueReport& q : r.per_queue) {
    r.submitted += q.submitted;
    r.completed += q.completed;
    r.failed += q.failed;
    r.faults |= q.faults;
    slowest = std::max(slowest, q.elapsed_ns);
    if (q.failed && r.first_error.field == 0) {
      r.first_error = nvme::Status{q.first_error_status};
      r.first_error_qid = q.qid;
      r.first_error_tag = q.first_error_tag;
    }
  }
  r.seconds = double(slowest) / 1e9;
  return r;
}

uint32_t queues_used(const DeviceQueueSet& set, const ReadOptions& o) {
  return o.queues == 0 ? set.size() : std::min(o.queues, set.size());
}

ReadResult run_extents(DeviceQueueSet& set, const Extent* ext, uint32_t n, const DeviceBuffer& dst,
                       const ReadOptions& o) {
  const uint32_t nq = queues_used(set, o);
  const uint32_t lba_shift = __builtin_ctz(set.lba_bytes());
  DeviceArray<uint64_t> prefix(n), total(1);
  DeviceArray<uint32_t> bad(1);
  check_cuda(cudaMemset(bad.p, 0, 4), "cudaMemset");
  plan_extents<<<1, 32>>>(ext, n, set.max_blocks_per_command(), lba_shift, dst.bytes, prefix.p, total.p, bad.p);
  check_cuda(cudaGetLastError(), "plan_extents launch");
  uint64_t commands = 0;
  uint32_t bad_h = 0;
  check_cuda(cudaMemcpy(&commands, total.p, 8, cudaMemcpyDeviceToHost), "plan_extents");
  check_cuda(cudaMemcpy(&bad_h, bad.p, 4, cudaMemcpyDeviceToHost), "plan_extents");
  if (bad_h != 0)
    throw Error(ErrorKind::kInvalidArgument, "extent " + std::to_string(bad_h - 1) +
                                                 " is invalid: no blocks, a destination offset that is not dword "
                                                 "aligned, or a range past the destination buffer");
  DeviceArray<QueueReport> reports(nq);
  extents_kernel<<<nq, 32>>>(set.device(), nq, ext, prefix.p, n, commands, dst, o.depth, o.timeout_ns, reports.p);
  check_cuda(cudaGetLastError(), "extents_kernel launch");
  return collect(reports, nq, commands);
}

}  // namespace

std::string ReadResult::describe() const {
  std::string s = std::to_string(commands) + " commands, " + std::to_string(completed) + " completed, " +
                  std::to_string(failed) + " failed";
  if (failed) {
    s += " (first: " + nvme::describe(first_error) + " on queue " + std::to_string(first_error_qid) + ", tag " +
         std::to_string(first_error_tag) + ")";
  }
  if (faults) s += "; faults: " + describe_faults(faults);
  return s;
}

ReadResult read_extents(DeviceQueueSet& queues, const Extent* device_extents, uint32_t count, const DeviceBuffer& dst,
                        const ReadOptions& options) {
  return run_extents(queues, device_extents, count, dst, options);
}

ReadResult gather_extents(DeviceQueueSet& queues, const Extent* device_table, uint32_t table_count,
                          const uint32_t* device_indices, uint32_t count, uint64_t dst_stride, const DeviceBuffer& dst,
                          const ReadOptions& options) {
  DeviceArray<Extent> picked(count);
  select_extents<<<std::max<uint32_t>(1, (count + 255) / 256), 256>>>(device_table, table_count, device_indices, count,
                                                                       dst_stride, picked.p);
  check_cuda(cudaGetLastError(), "select_extents launch");
  return run_extents(queues, picked.p, count, dst, options);
}

ReadResult read_stream(DeviceQueueSet& queues, const StreamSpec& spec, const DeviceBuffer& dst,
                       const ReadOptions& options) {
  const uint32_t nq = queues_used(queues, options);
  if (spec.blocks == 0 || spec.blocks > queues.max_blocks_per_command() || spec.span_blocks < spec.blocks ||
      spec.slots == 0 || (spec.slots & (spec.slots - 1)) != 0)
    throw Error(ErrorKind::kInvalidArgument, "read_stream: blocks must be 1.." +
                                                 std::to_string(queues.max_blocks_per_command()) +
                                                 ", span at least one command, slots a power of two");
  const uint64_t need = (spec.shared_dst ? 1 : nq) * uint64_t(spec.slots) * spec.slot_bytes;
  if (need > dst.bytes || spec.slot_bytes < (uint64_t(spec.blocks) * queues.lba_bytes()))
    throw Error(ErrorKind::kInvalidArgument, "read_stream: destination buffer too small for its slots");
  DeviceArray<QueueReport> reports(nq);
  stream_kernel<<<nq, 32>>>(queues.device(), nq, spec, dst, options.depth, options.timeout_ns, reports.p);
  check_cuda(cudaGetLastError(), "stream_kernel launch");
  return collect(reports, nq, spec.per_queue * nq);
}

}  // namespace gpunvme::device
