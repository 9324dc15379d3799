// The GPU executor's share of the load check (load_check.h): the bytes that never pass through the
// host, checked on the GPU where they land, the first time they are read:
//   - a streamed layer, over its slot, after the compute stream waited for the slot's reads and
//     before it is released (runtime/stream/gpu_crc.h);
//   - fetched MoE experts, over the fetcher's slots, after the kernels that consumed them
//     (runtime/stream/gpu_expert_crc.h), each expert part once, on a low-priority stream of its own:
//     on the compute stream they delayed every later layer (Qwen3-30B-A3B 8G:0 pcie5 on the H200: 80 %
//     of the bound with the checks, 91 % without). Whoever writes the fetcher's slots or tables next
//     (the next fetch, a prefetch) waits for them first: expert_check_done(). Where the consumers
//     copied the experts into VRAM first (gpu_expert_stage.h), the check reads those copies: no second
//     crossing of the host link, and the next fetch waits only for the fetch's tables to be read; the
//     copies' buffer is then reused after staged_check_done(buffer).
// The CRCs land in pinned memory; end_pass() adds them to the verifier once the pass's logits are on
// the host (the executor waited for the compute stream anyway) and throws for a chunk that did not
// match, before any token of that pass is used. A piece already checked costs nothing: after the
// first pass a streamed layer is a test of one flag, and experts stop once all their bytes are in.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

// First, in a block of its own: it declares the global CUstream_st, which gpu_forward.h's
// gpu_stream_t must then name (else it declares a gpunvme::llm::CUstream_st of its own).
#include "runtime/stream/cuda_stream.h"

#include <cuda_runtime_api.h>

#include "examples/llm/compute/gpu_forward.h"
#include "examples/llm/engine/load_check.h"
#include "runtime/stream/cuda_owned.h"
#include "runtime/stream/gpu_crc.h"
#include "runtime/stream/gpu_expert_crc.h"
#include "runtime/stream/layer_streamer.h"

namespace gpunvme::stream {
class GpuExpertFetcher;
}

namespace gpunvme::llm {

class GpuLoadCheck {
 public:
  // After check.finish_start(): `streamer` (or null) streams the NVMe tier's layers, `fetcher` (or
  // null) the routed experts, at most `max_experts` distinct ones per fetch.
  GpuLoadCheck(LoadCheck& check, const ModelOnDevice& m, const stream::LayerStreamer* streamer,
               const stream::GpuExpertFetcher* fetcher, uint32_t max_experts);

  // Streamed layer `index` (the streamer's) is in slot view `v`, the compute stream waited for it.
  void streamed(uint32_t index, const stream::SlotView& v, stream::cuda_stream_t s);
  // The kernels consuming the fetcher's latest fetch are enqueued on `s`; `staged`: where they read its
  // experts, when copied into GPU memory (base null: in the fetcher's slots).
  void experts(stream::cuda_stream_t s, const stream::StagedExperts& staged = {});
  // Recorded after the latest expert check read what the next fetch may overwrite (the slots, or with
  // staged experts only the fetch's tables): a stream about to write the fetcher's slots or tables
  // waits for it (null: no expert is checked).
  cudaEvent_t expert_check_done() const { return experts_ ? done_.get() : nullptr; }
  // Recorded after the latest check that read staging buffer `buffer` (0 or 1; null: no expert is
  // checked): the consumer waits for it before copying into that buffer again.
  cudaEvent_t staged_check_done(uint32_t buffer) const { return experts_ && buffer < 2 ? staged_done_[buffer].get() : nullptr; }
  // The streams ran the pass's work (its logits are on the host): results in, mismatches thrown.
  void end_pass();
  ~GpuLoadCheck();
  GpuLoadCheck(const GpuLoadCheck&) = delete;
  GpuLoadCheck& operator=(const GpuLoadCheck&) = delete;

 private:
  // A plan piece's bytes [file offset, + length) and where they start in a slot.
  struct SlotPiece {
    uint64_t offset, bytes, slot_offset;
  };
  std::vector<SlotPiece> slot_pieces(const plan::CommandPlan& p) const;

  LoadCheck& check_;
  const ModelOnDevice& m_;
  std::vector<bool> streamed_done_;  // [streamed index]: its first read was checked
  std::unique_ptr<stream::GpuCrcLog> streamed_log_;
  std::unique_ptr<stream::GpuExpertCrc> experts_;
  stream::CudaStream side_;             // the expert check's stream (lowest priority)
  stream::CudaEvent consumed_, done_;   // consumers enqueued on the compute stream; the check ran
  stream::CudaEvent staged_done_[2];    // the check of each staging buffer ran
  uint64_t expert_bytes_ = 0;  // results taken so far
};

}  // namespace gpunvme::llm
