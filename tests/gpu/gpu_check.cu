#include "gpu_check.h"

#include <cuda_runtime.h>

#include "device/gpunvme_device.cuh"
#include "device/queue_set.h"

namespace gpunvme::test {
namespace {

__global__ void mismatch_kernel(const uint8_t* dst, const VerifySpan* spans, uint32_t n, uint64_t seed,
                                unsigned long long* bad) {
  unsigned long long mine = 0;
  for (uint32_t s = blockIdx.y; s < n; s += gridDim.y) {
    const VerifySpan sp = spans[s];
    const uint64_t words = sp.bytes / 8;
    const uint64_t* d = reinterpret_cast<const uint64_t*>(dst + sp.dst_offset);
    for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words; i += uint64_t(gridDim.x) * blockDim.x)
      mine += d[i] != pattern_qword(seed, sp.ns_offset / 8 + i);
  }
  if (mine) atomicAdd(bad, mine);
}

__global__ void c_api_kernel(gpunvme_device_queue_t* q, const uint64_t* lbas, uint64_t count, uint32_t blocks,
                             uint32_t lba_bytes, uint64_t dst_bus, uint64_t stride, uint32_t depth,
                             uint64_t timeout_ns, CApiResult* out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  CApiResult r;
  if (!gpunvme_queue_acquire(q)) {
    r.protocol_errors = 1;
    *out = r;
    return;
  }
  const uint64_t t0 = gpunvme::device::global_timer_ns();
  const uint64_t bytes = uint64_t(blocks) * lba_bytes;
  uint64_t next = 0, in_flight = 0;
  while (next < count || in_flight > 0) {
    if (next < count && in_flight < depth) {
      const uint64_t bus = dst_bus + next * stride;
      const uint64_t page_end = (bus | 4095) + 1;  // transfers span at most two pages here
      const uint64_t prp2 = bus + bytes > page_end ? page_end : 0;
      const int cid = gpunvme_sq_submit_read(q, lbas[next], blocks - 1, bus, prp2);
      if (cid >= 0) {
        ++next;
        ++in_flight;
        ++r.submitted;
        continue;
      }
    }
    const gpunvme_cq_result c = gpunvme_cq_poll_completion(q, timeout_ns);
    if (c.timed_out) {
      ++r.timed_out;
      break;
    }
    --in_flight;
    if (c.status == GPUNVME_STATUS_PROTOCOL_ERROR) {
      ++r.protocol_errors;
      break;
    }
    if (c.success) {
      ++r.succeeded;
    } else {
      if (r.failed == 0) r.first_status = c.status;
      ++r.failed;
    }
  }
  r.elapsed_ns = gpunvme::device::global_timer_ns() - t0;
  gpunvme_queue_release(q);
  *out = r;
}

}  // namespace

uint64_t gpu_count_mismatches(const uint8_t* gpu_dst, const std::vector<VerifySpan>& spans, uint64_t seed) {
  DeviceBlob s(spans.data(), spans.size() * sizeof(VerifySpan));
  unsigned long long* bad = nullptr;
  device::check_cuda(cudaMalloc(&bad, 8), "cudaMalloc");
  device::check_cuda(cudaMemset(bad, 0, 8), "cudaMemset");
  const dim3 grid(64, spans.size() < 1024 ? uint32_t(spans.size()) : 1024u);
  mismatch_kernel<<<grid, 256>>>(gpu_dst, s.as<VerifySpan>(), uint32_t(spans.size()), seed, bad);
  device::check_cuda(cudaGetLastError(), "mismatch_kernel launch");
  unsigned long long h = 0;
  device::check_cuda(cudaMemcpy(&h, bad, 8, cudaMemcpyDeviceToHost), "mismatch_kernel");
  cudaFree(bad);
  return h;
}

CApiResult gpu_c_api_reads(device::DeviceQueue* q, const std::vector<uint64_t>& lbas, uint32_t blocks,
                           uint32_t lba_bytes, uint64_t dst_bus, uint64_t stride, uint32_t depth, uint64_t timeout_ns) {
  DeviceBlob l(lbas.data(), lbas.size() * 8);
  CApiResult* out = nullptr;
  device::check_cuda(cudaMalloc(&out, sizeof(CApiResult)), "cudaMalloc");
  c_api_kernel<<<1, 32>>>(q, l.as<uint64_t>(), lbas.size(), blocks, lba_bytes, dst_bus, stride, depth, timeout_ns, out);
  device::check_cuda(cudaGetLastError(), "c_api_kernel launch");
  CApiResult h;
  device::check_cuda(cudaMemcpy(&h, out, sizeof h, cudaMemcpyDeviceToHost), "c_api_kernel");
  cudaFree(out);
  return h;
}

DeviceBlob::DeviceBlob(const void* host, uint64_t bytes) {
  device::check_cuda(cudaMalloc(&p, bytes ? bytes : 8), "cudaMalloc");
  if (bytes) device::check_cuda(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
}
DeviceBlob::~DeviceBlob() { cudaFree(p); }

}  // namespace gpunvme::test
