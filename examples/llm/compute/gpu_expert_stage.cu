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
constexpr uint32_t kMaxBlocks = 1024;  // a 3.5 MB part at 16 KiB a block-round: about 220

// Bytes [b0, b1) of routing id k's part `proj` from the scratchpad into the staging (the product
// kernel's lookup of the part, so a part it would not read is not copied). Source and destination
// agree mod 4096 (staged_offset), so one head of at most 15 bytes aligns both for 16-byte loads.
__global__ void stage_part_kernel(const uint8_t* scratch, const stream::GpuFetchedExpert* ex, const uint32_t* selection,
                                  uint32_t k, uint32_t proj, uint64_t part_bytes, uint64_t b0, uint64_t b1,
                                  stream::StagedExperts st) {
  const uint32_t d = selection[k];
  const stream::GpuFetchedExpert& e = ex[d];
  uint64_t off = ~0ull;
  for (uint32_t p = 0; p < e.part_count && p < stream::kMaxExpertParts; ++p)
    if (e.part_proj[p] == proj && e.part_bytes[p] == part_bytes) off = e.part_offset[p];
  if (off == ~0ull || e.failed != 0) return;  // the product writes NaN for it
  const uint8_t* src = scratch + off + b0;
  uint8_t* dst = st.base + stream::staged_offset(st, d, e, off) + b0;
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x, threads = uint64_t(gridDim.x) * blockDim.x;
  const uint64_t n = b1 - b0;
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

}  // namespace

ExpertStaging::ExpertStaging() {
  const char* v = std::getenv("GPUNVME_EXPERT_STAGE");
  enabled_ = !(v && std::string(v) == "0");
}

ExpertStaging::~ExpertStaging() { cudaFree(mem_); }

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
  return {base_ + turn_ * buffer_bytes_, stride_, turn_};
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
