// The CRC-32C of MoE experts the GPU expert fetcher read, computed on the GPU over its scratchpad
// (cache slots), the first time each expert part is used: which experts a fetch holds is known on
// the GPU only (the router's ids never come to the host), so a one-thread kernel reads the fetch's
// result after its consumers ran, appends the parts not seen before (a device-side flag per part),
// cut where the caller's chunks end, to a device-appended GpuCrcLog (gpu_crc.h), and its kernels
// CRC them. The host takes the results after it synchronized with the stream anyway.
//
// Kept apart from gpu_expert_fetcher.* (it reads only the fetcher's public device tables): the
// fetcher does not change, and an expert's bytes are checked where its consumers read them.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/stream/cuda_stream.h"
#include "runtime/stream/gpu_crc.h"
#include "runtime/stream/gpu_fetch_types.h"

namespace gpunvme::stream {

class GpuExpertFetcher;

// Where one part of an expert lies in the caller's numbering (the engine: the model file).
struct ExpertPartBytes {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  bool check = true;  // false: its bytes need no check (already verified another way)
};

class GpuExpertCrc {
 public:
  // parts[key]: expert key's (layer * experts + expert) parts in the order of the fetcher's catalog;
  // pieces never cross a multiple of 2^chunk_shift of `offset`. max_experts: the fetcher's
  // FetcherOptions::max_experts_per_fetch (the distinct experts of one fetch).
  GpuExpertCrc(const GpuExpertFetcher& f, const std::vector<std::vector<ExpertPartBytes>>& parts, uint32_t chunk_shift,
               uint32_t max_experts);
  ~GpuExpertCrc();
  GpuExpertCrc(const GpuExpertCrc&) = delete;
  GpuExpertCrc& operator=(const GpuExpertCrc&) = delete;

  // After the kernels consuming the fetcher's latest demand fetch, on their stream `s`: the CRCs of
  // its experts' parts not checked before. A failed read's expert is skipped (the fetcher reports it).
  void after_consumers(cuda_stream_t s) {
    append(s);
    crc(s);
  }
  // The same in two steps. append: on `s`, the parts to check are taken from the fetch's tables (after
  // it, the next fetch may overwrite them); where its consumers copied them into GPU memory (`staged`,
  // gpu_fetch_types.h), the gate, up and down parts are read there (other parts wait for an unstaged
  // fetch). crc: on `s`, after append, their CRCs (they read the slots, or the staged copies).
  void append(cuda_stream_t s, const StagedExperts& staged = {});
  void crc(cuda_stream_t s);
  // As GpuCrcLog::take(), after synchronizing with `s`.
  std::span<const GpuCrcResult> take() { return log_->take(); }
  // Bytes of all parts to check: once the results added up to it, after_consumers() has nothing to do.
  uint64_t bytes_to_check() const { return to_check_; }

 private:
  const GpuExpertFetcher& f_;
  uint32_t n_experts_ = 0, chunk_shift_ = 0, max_experts_ = 0;
  uint32_t* part_first_ = nullptr;   // device: [keys + 1]
  ExpertPartBytes* parts_ = nullptr; // device: [parts]
  uint8_t* seen_ = nullptr;          // device: [parts], 1 once appended (or needing no check)
  uint64_t to_check_ = 0;
  std::unique_ptr<GpuCrcLog> log_;
};

}  // namespace gpunvme::stream
