#include "bench/gpu_cmd_rate_kernel.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "device/warp_queue.cuh"
#include "driver/status.h"
#include "host/error.h"

namespace gpunvme::bench {
namespace {

using device::check_cuda;
using device::DeviceBuffer;
using device::DeviceQueue;
using device::QueueReport;

__global__ void stream_kernel(DeviceQueue* qs, uint32_t nq, StreamSpec spec, DeviceBuffer dst, uint32_t depth,
                              uint64_t timeout_ns, QueueReport* out) {
  const uint32_t w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
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
    device::prps_for(qc, cid, dst, slot * spec.slot_bytes, bytes, &p);
    *tag = uint32_t(i);
    return nvme::make_read(qc.nsid, lba, spec.blocks, p.prp1, p.prp2);
  };
  const QueueReport r = device::warp_pump(q, spec.per_queue, depth, timeout_ns, make, [](uint32_t, nvme::Status) {});
  if ((threadIdx.x & 31) == 0) out[w] = r;
}

void check_spec(const device::DeviceQueueSet& queues, const StreamSpec& spec, const DeviceBuffer& dst) {
  if (spec.blocks == 0 || spec.blocks > queues.max_blocks_per_command() || spec.span_blocks < spec.blocks ||
      spec.slots == 0 || (spec.slots & (spec.slots - 1)) != 0)
    throw Error(ErrorKind::kInvalidArgument, "read_stream: blocks must be 1.." +
                                                 std::to_string(queues.max_blocks_per_command()) +
                                                 ", span at least one command, slots a power of two");
  const uint64_t need = (spec.shared_dst ? 1 : queues.size()) * uint64_t(spec.slots) * spec.slot_bytes;
  if (need > dst.bytes || spec.slot_bytes < (uint64_t(spec.blocks) * queues.lba_bytes()))
    throw Error(ErrorKind::kInvalidArgument, "read_stream: destination buffer too small for its slots");
}

StreamResult fold(const std::vector<QueueReport>& reports, uint64_t commands) {
  StreamResult r;
  r.commands = commands;
  for (const QueueReport& q : reports) {
    r.completed += q.completed;
    r.failed += q.failed;
    r.faults |= q.faults;
    if (q.failed && r.first_error_status == 0) {
      r.first_error_status = q.first_error_status;
      r.first_error_qid = q.qid;
    }
  }
  return r;
}

}  // namespace

std::string StreamResult::describe() const {
  std::string s = std::to_string(commands) + " commands, " + std::to_string(completed) + " completed, " +
                  std::to_string(failed) + " failed";
  if (failed)
    s += " (first: " + nvme::describe(nvme::Status{first_error_status}) + " on queue " +
         std::to_string(first_error_qid) + ")";
  if (faults) s += "; faults: " + device::describe_faults(faults);
  return s;
}

StreamResult read_stream(device::DeviceQueueSet& queues, const StreamSpec& spec, const DeviceBuffer& dst) {
  check_spec(queues, spec, dst);
  const uint32_t nq = queues.size();
  QueueReport* reports = nullptr;
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&reports), sizeof(QueueReport) * nq), "cudaMalloc(reports)");
  std::vector<QueueReport> host(nq);
  // Zeroed first: a kernel that never ran (a failed or skipped launch) reports nothing completed.
  cudaError_t e = cudaMemset(reports, 0, sizeof(QueueReport) * nq);
  if (e == cudaSuccess) {
    stream_kernel<<<nq, 32>>>(queues.device(), nq, spec, dst, spec.depth, spec.timeout_ns, reports);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaMemcpy(host.data(), reports, sizeof(QueueReport) * nq, cudaMemcpyDeviceToHost);
  cudaFree(reports);
  check_cuda(e, "gpu_cmd_rate: the stream kernel");
  return fold(host, spec.per_queue * nq);
}

}  // namespace gpunvme::bench
