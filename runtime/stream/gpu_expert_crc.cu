#include "runtime/stream/gpu_expert_crc.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>

#include "device/cuda_check.h"
#include "runtime/model/tensor_names.h"
#include "runtime/stream/gpu_expert_fetcher.h"
#include "runtime/stream/gpu_fetch_types.h"

namespace gpunvme::stream {
namespace {

using device::check_cuda;

// One thread: the demand fetch's distinct experts (a few) and their parts (three each), appended as
// pieces cut at chunk boundaries. Parts seen before are skipped: after the first use of an expert
// part its check costs this kernel's loop only.
__global__ void expert_pieces_kernel(const GpuFetchResult* result, const GpuFetchedExpert* experts, const uint8_t* scratch,
                                     StagedExperts staged, uint32_t n_experts, const uint32_t* part_first,
                                     const ExpertPartBytes* parts, uint8_t* seen, uint32_t chunk_shift, GpuCrcPiece* out,
                                     uint32_t* state, uint64_t capacity, uint32_t max_batch) {
  const uint32_t first = state[crc_state::kAppended];
  uint32_t n = 0;
  const GpuFetchResult r = *result;
  for (uint32_t d = 0; r.error == 0 && d < r.count; ++d) {
    const GpuFetchedExpert& e = experts[d];
    if (e.failed) continue;
    const uint64_t key = uint64_t(r.layer) * n_experts + e.expert;
    const uint32_t p0 = part_first[key], p1 = part_first[key + 1];
    for (uint32_t i = 0; i < e.part_count && p0 + i < p1; ++i) {
      const uint32_t pi = p0 + i;
      if (seen[pi]) continue;
      // Staged: only the products' parts were copied (gpu_forward.cu's gate, up and down).
      if (staged.base && e.part_proj[i] > uint32_t(model::Projection::kDown)) continue;
      if (e.part_bytes[i] != parts[pi].bytes) {  // the tables disagree: report, check nothing of it
        state[crc_state::kOverflow] |= 4u;
        continue;
      }
      seen[pi] = 1;
      const uint8_t* src = staged.base ? staged.base + staged_offset(staged, d, e, e.part_offset[i]) : scratch + e.part_offset[i];
      uint64_t off = parts[pi].offset, left = parts[pi].bytes;
      while (left) {
        const uint64_t end = ((off >> chunk_shift) + 1) << chunk_shift;
        const uint64_t k = left < end - off ? left : end - off;
        if (first + n >= capacity || n >= max_batch) {
          state[crc_state::kOverflow] |= 1u;
          break;
        }
        out[first + n] = {src, off, k};
        ++n;
        src += k, off += k, left -= k;
      }
    }
  }
  state[crc_state::kBatchFirst] = first;
  state[crc_state::kBatchCount] = n;
  state[crc_state::kAppended] = first + n;
}

uint64_t pieces_of(const ExpertPartBytes& p, uint32_t shift) {
  if (!p.bytes) return 0;
  return ((p.offset + p.bytes - 1) >> shift) - (p.offset >> shift) + 1;
}

}  // namespace

GpuExpertCrc::GpuExpertCrc(const GpuExpertFetcher& f, const std::vector<std::vector<ExpertPartBytes>>& parts,
                           uint32_t chunk_shift, uint32_t max_experts)
    : f_(f), n_experts_(f.catalog().n_experts), chunk_shift_(chunk_shift), max_experts_(max_experts) {
  const ExpertCatalog& cat = f.catalog();
  if (parts.size() != cat.parts.size()) throw std::invalid_argument("GPU expert CRC: parts for another catalog");
  std::vector<uint32_t> first(1, 0);
  std::vector<ExpertPartBytes> flat;
  std::vector<uint8_t> seen;
  uint64_t capacity = 0, widest = 0;  // pieces in all; most pieces of one expert
  for (size_t k = 0; k < parts.size(); ++k) {
    if (parts[k].size() != cat.parts[k].size()) throw std::invalid_argument("GPU expert CRC: an expert's parts differ from the catalog's");
    uint64_t of_expert = 0;
    for (const ExpertPartBytes& p : parts[k]) {
      flat.push_back(p);
      seen.push_back(p.check && p.bytes ? 0 : 1);
      of_expert += pieces_of(p, chunk_shift);
      if (p.check && p.bytes) capacity += pieces_of(p, chunk_shift), to_check_ += p.bytes;
    }
    widest = std::max(widest, of_expert);
    first.push_back(uint32_t(flat.size()));
  }
  const uint64_t batch = std::max<uint64_t>(1, widest * max_experts);
  if (batch > 65535) throw std::invalid_argument("GPU expert CRC: too many pieces per fetch");
  log_ = std::make_unique<GpuCrcLog>(capacity, uint32_t(batch), GpuCrcLog::Appender::kDevice);
  check_cuda(cudaMalloc(&part_first_, first.size() * sizeof(uint32_t)), "cudaMalloc for the expert CRC's tables");
  check_cuda(cudaMalloc(&parts_, std::max<size_t>(flat.size(), 1) * sizeof(ExpertPartBytes)), "cudaMalloc for the expert CRC's tables");
  check_cuda(cudaMalloc(&seen_, std::max<size_t>(seen.size(), 1)), "cudaMalloc for the expert CRC's tables");
  check_cuda(cudaMemcpy(part_first_, first.data(), first.size() * sizeof(uint32_t), cudaMemcpyHostToDevice), "expert CRC tables");
  check_cuda(cudaMemcpy(parts_, flat.data(), flat.size() * sizeof(ExpertPartBytes), cudaMemcpyHostToDevice), "expert CRC tables");
  check_cuda(cudaMemcpy(seen_, seen.data(), seen.size(), cudaMemcpyHostToDevice), "expert CRC tables");
}

GpuExpertCrc::~GpuExpertCrc() {
  cudaFree(seen_);
  cudaFree(parts_);
  cudaFree(part_first_);
}

void GpuExpertCrc::append(cuda_stream_t s, const StagedExperts& staged) {
  auto st = reinterpret_cast<cudaStream_t>(s);
  expert_pieces_kernel<<<1, 1, 0, st>>>(f_.device_result(), f_.device_experts(),
                                         static_cast<const uint8_t*>(f_.scratchpad().device()), staged, n_experts_,
                                         part_first_, parts_, seen_, chunk_shift_, log_->device_pieces(),
                                         log_->device_state(), log_->capacity(), log_->max_batch());
  check_cuda(cudaGetLastError(), "GPU expert CRC: pieces kernel launch");
}

void GpuExpertCrc::crc(cuda_stream_t s) { log_->enqueue_appended(s); }

}  // namespace gpunvme::stream
