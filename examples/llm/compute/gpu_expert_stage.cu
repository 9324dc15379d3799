#include "examples/llm/compute/gpu_expert_stage.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "device/cuda_check.h"
#include "examples/llm/compute/gpu_forward.h"

namespace gpunvme::llm {
namespace {

constexpr uint32_t kThreads = 256;
constexpr uint32_t kLoads = 4;         // 16-byte loads a thread has in flight: the link's latency is microseconds
constexpr uint32_t kMaxBlocks = 1024;  // a part's copy: a 3.5 MB part at 16 KiB a block-round is about 220
// The hits' copy (GPUNVME_EXPERT_STAGE=hits), all its experts together: fewer blocks than SMs, 1.5 MB in
// flight. At 1,024 blocks it filled every SM for about a millisecond beside the misses' reads, which
// may have kept the fetcher's pump and the next kernels waiting (H200, 235B 22G:32G pcie5: 89 % with
// it, 93 % part by part, one 4-token run each, two calls); not measured at this size.
constexpr uint32_t kMaxHitBlocks = 96;

// Whether the copy right after the placement (stage_hits_kernel) took expert e whole: a hit whose
// bytes were in its slot then (not pending on a prefetch's reads), and that fits a staged expert.
__device__ bool copied_at_placement(const stream::GpuFetchedExpert& e, const stream::StagedExperts& st) {
  return st.hits && e.hit && !e.pending && !e.failed && (e.offset & (stream::kStagedAlign - 1)) + e.bytes <= st.stride;
}

// n bytes src -> dst by threads tid of `threads`. Source and destination agree mod 4096 (staged_offset),
// so one head of at most 15 bytes aligns both for 16-byte loads, kLoads of them in flight a thread.
__device__ void copy_span(uint8_t* dst, const uint8_t* src, uint64_t n, uint64_t tid, uint64_t threads) {
  if ((reinterpret_cast<uintptr_t>(src) ^ reinterpret_cast<uintptr_t>(dst)) & 15) {  // a scratchpad not page-aligned
    for (uint64_t i = tid; i < n; i += threads) dst[i] = src[i];
    return;
  }
  const uint64_t head = std::min<uint64_t>(n, (16 - (reinterpret_cast<uintptr_t>(src) & 15)) & 15);
  for (uint64_t i = tid; i < head; i += threads) dst[i] = src[i];
  const uint64_t n16 = (n - head) / 16;
  const uint4* s16 = reinterpret_cast<const uint4*>(src + head);
  uint4* d16 = reinterpret_cast<uint4*>(dst + head);
  for (uint64_t i = tid; i < n16; i += kLoads * threads) {
    uint4 v[kLoads];
#pragma unroll
    for (uint32_t j = 0; j < kLoads; ++j)
      if (i + j * threads < n16) v[j] = s16[i + j * threads];
#pragma unroll
    for (uint32_t j = 0; j < kLoads; ++j)
      if (i + j * threads < n16) d16[i + j * threads] = v[j];
  }
  for (uint64_t i = head + n16 * 16 + tid; i < n; i += threads) dst[i] = src[i];
}

// Bytes [b0, b1) of routing id k's part `proj` from the scratchpad into the staging (the product
// kernel's lookup of the part, so a part it would not read is not copied), unless the expert was
// copied whole at its placement.
__global__ void stage_part_kernel(const uint8_t* scratch, const stream::GpuFetchedExpert* ex, const uint32_t* selection,
                                  uint32_t k, uint32_t proj, uint64_t part_bytes, uint64_t b0, uint64_t b1,
                                  stream::StagedExperts st) {
  const uint32_t d = selection[k];
  const stream::GpuFetchedExpert& e = ex[d];
  const uint64_t off = stream::find_part(e, proj, part_bytes);
  if (off == stream::kNoPart || e.failed != 0 || copied_at_placement(e, st)) return;  // no such part: the product writes NaN
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x, threads = uint64_t(gridDim.x) * blockDim.x;
  copy_span(st.base + stream::staged_offset(st, d, e, off) + b0, scratch + off + b0, b1 - b0, tid, threads);
}

// Right after a fetch's placement, beside its reads: routing id blockIdx.y's expert, whole, if it is a
// hit already in its slot (copied_at_placement). Its products then wait for no read and no copy, so
// the host link carries the hits while the drive reads the misses, whatever the routing order.
__global__ void stage_hits_kernel(const uint8_t* scratch, const stream::GpuFetchedExpert* ex, const uint32_t* selection,
                                  stream::StagedExperts st) {
  const uint32_t d = selection[blockIdx.y];
  const stream::GpuFetchedExpert& e = ex[d];
  if (!copied_at_placement(e, st)) return;
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x, threads = uint64_t(gridDim.x) * blockDim.x;
  copy_span(st.base + stream::staged_offset(st, d, e, e.offset), scratch + e.offset, e.bytes, tid, threads);
}

}  // namespace

ExpertStaging::ExpertStaging() {
  const char* v = std::getenv("GPUNVME_EXPERT_STAGE");
  enabled_ = !(v && std::string(v) == "0");
  hits_ = enabled_ && v && std::string(v) == "hits";
  if (!hits_) return;
  device::check_cuda(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "expert staging stream");
  device::check_cuda(cudaEventCreateWithFlags(&before_, cudaEventDisableTiming), "expert staging event");
  device::check_cuda(cudaEventCreateWithFlags(&hits_done_, cudaEventDisableTiming), "expert staging event");
}

ExpertStaging::~ExpertStaging() {
  if (side_) cudaStreamSynchronize(side_);
  cudaFree(mem_);
  if (side_) cudaStreamDestroy(side_);
  if (before_) cudaEventDestroy(before_);
  if (hits_done_) cudaEventDestroy(hits_done_);
}

stream::StagedExperts ExpertStaging::next(ExpertSource& src, uint32_t experts, gpu_stream_t s) {
  const uint64_t slot = src.slot_bytes();
  if (!enabled_ || slot == 0 || experts == 0) return {};
  const uint64_t stride = (slot + stream::kStagedAlign - 1) / stream::kStagedAlign * stream::kStagedAlign + stream::kStagedAlign;
  if (!mem_ || stride > stride_ || experts > experts_) {
    // First use (or a larger source): enqueued work may still read the old buffers.
    if (mem_) device::check_cuda(cudaDeviceSynchronize(), "expert staging: before growing its buffers");
    cudaFree(mem_);
    mem_ = base_ = nullptr;
    stride_ = stride, experts_ = experts, buffer_bytes_ = stride * experts;
    if (cudaMalloc(&mem_, 2 * buffer_bytes_ + stream::kStagedAlign) != cudaSuccess) {
      cudaGetLastError();  // no room beside the budget: the products read the scratchpad, as before
      mem_ = nullptr, enabled_ = false;
      return {};
    }
    const auto at = reinterpret_cast<uintptr_t>(mem_);
    base_ = mem_ + ((stream::kStagedAlign - at % stream::kStagedAlign) % stream::kStagedAlign);
  }
  turn_ ^= 1u;
  src.before_staging(turn_, s);
  stream::StagedExperts st{base_ + turn_ * buffer_bytes_, stride_, turn_, 0};
  if (!hits_) return st;
  // The side stream after everything `s` waited for (the buffer's last readers) and the placement.
  const auto cs = reinterpret_cast<cudaStream_t>(s);
  device::check_cuda(cudaEventRecord(before_, cs), "expert staging event");
  device::check_cuda(cudaStreamWaitEvent(side_, before_, 0), "expert staging wait");
  if (!src.after_placement(reinterpret_cast<gpu_stream_t>(side_))) return st;
  st.hits = 1;
  const uint64_t rounds = (st.stride / 16 + kThreads * kLoads - 1) / (kThreads * kLoads);
  const dim3 grid(uint32_t(std::clamp<uint64_t>(rounds, 1, std::max(1u, kMaxHitBlocks / experts))), experts);
  stage_hits_kernel<<<grid, kThreads, 0, side_>>>(src.scratch(), src.experts(), src.selection(), st);
  device::check_cuda(cudaGetLastError(), "expert staging: hits kernel");
  device::check_cuda(cudaEventRecord(hits_done_, side_), "expert staging event");
  device::check_cuda(cudaStreamWaitEvent(cs, hits_done_, 0), "expert staging wait");
  return st;
}

void ExpertStaging::copy(gpu_stream_t s, const ExpertSource& src, const stream::StagedExperts& st, uint32_t k,
                         model::Projection proj, uint64_t part_bytes, uint64_t b0, uint64_t b1) const {
  if (!st.base || b1 <= b0) return;
  const uint64_t rounds = ((b1 - b0) / 16 + kThreads * kLoads - 1) / (kThreads * kLoads);
  const uint32_t blocks = uint32_t(std::clamp<uint64_t>(rounds, 1, kMaxBlocks));
  stage_part_kernel<<<blocks, kThreads, 0, reinterpret_cast<cudaStream_t>(s)>>>(
      src.scratch(), src.experts(), src.selection(), k, uint32_t(proj), part_bytes, b0, b1, st);
  device::check_cuda(cudaGetLastError(), "expert staging: copy kernel");
}

}  // namespace gpunvme::llm
