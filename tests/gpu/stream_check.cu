#include "stream_check.h"

#include <cuda_runtime.h>

#include <string>

#include "device/queue_set.h"
#include "device/warp_queue.cuh"
#include "gpu_check.h"
#include "runtime/stream/gpu_ticket_pump.cuh"

namespace gpunvme::test {
namespace {

cudaStream_t cu(stream::cuda_stream_t s) { return reinterpret_cast<cudaStream_t>(s); }

__device__ uint64_t count_bad(const uint8_t* base, uint64_t ns_offset, uint64_t bytes, uint64_t seed) {
  uint64_t bad = 0;
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes; i += stride)
    bad += base[i] != pattern_byte(seed, ns_offset + i);
  return bad;
}

__global__ void verify_slot(const uint8_t* slot, const VerifySpan* pieces, uint32_t n, uint64_t seed, uint64_t spin_ns,
                            const uint32_t* status, uint64_t* mismatches, uint32_t* status_seen) {
  if (spin_ns) {
    const uint64_t t0 = device::global_timer_ns();
    while (device::global_timer_ns() - t0 < spin_ns) {
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *status_seen = status ? *const_cast<const volatile uint32_t*>(status) : 0;
  uint64_t bad = 0;
  for (uint32_t p = 0; p < n; ++p) bad += count_bad(slot + pieces[p].dst_offset, pieces[p].ns_offset, pieces[p].bytes, seed);
  if (bad) atomicAdd(reinterpret_cast<unsigned long long*>(mismatches), static_cast<unsigned long long>(bad));
}

__global__ void toy_router(uint32_t* ids, uint32_t k, uint32_t token, uint32_t n_experts, uint32_t distinct) {
  for (uint32_t i = threadIdx.x; i < k; i += blockDim.x) ids[i] = toy_route(token, i, n_experts, distinct);
}

__global__ void verify_experts(const stream::GpuFetchResult* result, const stream::GpuFetchedExpert* experts,
                               const uint8_t* scratch, const uint64_t* ns_offsets, uint32_t layer, uint32_t n_experts,
                               uint64_t seed, uint64_t* mismatches) {
  const uint32_t token = result->token;
  const uint32_t count = result->count;
  uint64_t bad = 0;
  for (uint32_t d = 0; d < count; ++d) {
    const stream::GpuFetchedExpert* e = experts + d;
    // Per-expert readiness: spin on the expert's ready word (bounded), as a consumer kernel would;
    // a failed read sets `failed` and never `ready`, so that ends the spin at once.
    const uint64_t t0 = device::global_timer_ns();
    bool ready = true;
    while (*const_cast<const volatile uint32_t*>(&e->ready) != token) {
      if (*const_cast<const volatile uint32_t*>(&e->failed) != 0 || device::global_timer_ns() - t0 > 2'000'000'000ull) {
        ready = false;
        break;
      }
    }
    if (!ready) {
      if (blockIdx.x == 0 && threadIdx.x == 0) bad += 1;
      continue;
    }
    __threadfence_system();
    for (uint32_t k = 0; k < e->part_count; ++k) {
      const uint64_t ns = ns_offsets[(uint64_t(layer) * n_experts + e->expert) * 4 + k];
      bad += count_bad(scratch + e->part_offset[k], ns, e->part_bytes[k], seed);
    }
  }
  if (bad) atomicAdd(reinterpret_cast<unsigned long long*>(mismatches), static_cast<unsigned long long>(bad));
}

__global__ void verify_part(const stream::GpuFetchResult* result, const stream::GpuFetchedExpert* experts,
                            const uint32_t* selection, const uint32_t* part_ready, const uint8_t* scratch,
                            const uint64_t* ns_offsets, uint32_t layer, uint32_t n_experts, uint32_t k, uint32_t proj,
                            uint64_t seed, uint64_t* mismatches, uint64_t* failed, uint32_t upto) {
  const bool first = blockIdx.x == 0 && threadIdx.x == 0;
  const stream::GpuFetchedExpert* e = experts + selection[k];
  for (uint32_t x = 0; x <= upto; ++x)
    if (part_ready[stream::ready_word(k, proj, x)] != result->token) {
      if (first) atomicAdd(reinterpret_cast<unsigned long long*>(mismatches), 1ull);
      return;
    }
  if (e->failed != 0) {
    if (first) atomicAdd(reinterpret_cast<unsigned long long*>(failed), 1ull);
    return;
  }
  uint64_t bad = 0;
  for (uint32_t p = 0; p < e->part_count; ++p) {
    if (e->part_proj[p] != proj) continue;
    const uint64_t ns = ns_offsets[(uint64_t(layer) * n_experts + e->expert) * 4 + p];
    const uint64_t end = (upto + 1) * stream::part_slice_bytes(e->part_bytes[p]);
    bad += count_bad(scratch + e->part_offset[p], ns, end < e->part_bytes[p] ? end : e->part_bytes[p], seed);
  }
  if (bad) atomicAdd(reinterpret_cast<unsigned long long*>(mismatches), static_cast<unsigned long long>(bad));
}

// One warp per queue, as the runtime's ticket kernels: the commands come from make(), not templates.
__global__ void generated_reads(stream::TicketLaunch launch, uint64_t count, uint32_t blocks, uint64_t span,
                                device::DeviceBuffer dst) {
  const uint32_t w = blockIdx.x;
  if (w >= launch.queue_count) return;
  const device::DeviceQueue qc = launch.queues[w];
  const uint64_t bytes = uint64_t(blocks) << qc.lba_shift;
  stream::pump_ticket(
      launch, w, count,
      [&](uint64_t g, uint16_t cid) {
        nvme::PrpPair p;
        device::prps_for(qc, cid, dst, 0, bytes, &p);
        return nvme::make_read(qc.nsid, (g * blocks) % span, blocks, p.prp1, p.prp2);
      },
      [](uint64_t, nvme::Status) {});
}

}  // namespace

void enqueue_verify_slot(stream::cuda_stream_t s, const uint8_t* slot, const VerifySpan* pieces, uint32_t n,
                         uint64_t seed, uint64_t spin_ns, const uint32_t* status, uint64_t* mismatches,
                         uint32_t* status_seen) {
  verify_slot<<<64, 256, 0, cu(s)>>>(slot, pieces, n, seed, spin_ns, status, mismatches, status_seen);
  device::check_cuda(cudaGetLastError(), "verify_slot launch");
}

void enqueue_toy_router(stream::cuda_stream_t s, uint32_t* ids, uint32_t k, uint32_t token, uint32_t n_experts,
                        uint32_t distinct) {
  toy_router<<<1, 64, 0, cu(s)>>>(ids, k, token, n_experts, distinct);
  device::check_cuda(cudaGetLastError(), "toy_router launch");
}

void enqueue_verify_experts(stream::cuda_stream_t s, const stream::GpuFetchResult* result,
                            const stream::GpuFetchedExpert* experts, const uint8_t* scratch,
                            const uint64_t* ns_offsets, uint32_t layer, uint32_t n_experts, uint64_t seed,
                            uint64_t* mismatches) {
  verify_experts<<<32, 256, 0, cu(s)>>>(result, experts, scratch, ns_offsets, layer, n_experts, seed, mismatches);
  device::check_cuda(cudaGetLastError(), "verify_experts launch");
}

void enqueue_verify_part(stream::cuda_stream_t s, const stream::GpuFetchResult* result,
                         const stream::GpuFetchedExpert* experts, const uint32_t* selection,
                         const uint32_t* part_ready, const uint8_t* scratch, const uint64_t* ns_offsets,
                         uint32_t layer, uint32_t n_experts, uint32_t k, uint32_t proj, uint64_t seed,
                         uint64_t* mismatches, uint64_t* failed, uint32_t upto) {
  verify_part<<<16, 256, 0, cu(s)>>>(result, experts, selection, part_ready, scratch, ns_offsets, layer, n_experts, k,
                                     proj, seed, mismatches, failed, upto);
  device::check_cuda(cudaGetLastError(), "verify_part launch");
}

uint64_t issue_generated_reads(stream::GpuSubmitter& gpu, uint64_t count, uint32_t blocks, uint64_t span_blocks,
                               const device::DeviceBuffer& dst) {
  const uint64_t span = span_blocks / blocks * blocks;
  return gpu.issue_kernel(
      nullptr,
      [&](const stream::TicketLaunch& l) { generated_reads<<<l.queue_count, 32>>>(l, count, blocks, span, dst); },
      [blocks, span](uint64_t g) {
        return "generated read #" + std::to_string(g) + " at LBA " + std::to_string((g * blocks) % span);
      });
}

}  // namespace gpunvme::test
