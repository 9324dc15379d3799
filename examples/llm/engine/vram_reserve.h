// The GPU memory the GPU executor keeps out of its default VRAM budget (what the GPU has free, less
// this): a fixed reserve for the CUDA context's growth, the queues, the streaming slots' command
// templates (of the slots past the default two at most kSlotTemplateVram, stream_slots.h), the expert
// fetcher's tables and the kernels' launch state, and a widest layer's dense bytes for each buffer the
// RAM tier's slots and a long pass's copy of a streamed layer take. One rule for the executor's budget
// and for the split over several GPUs, which sizes each GPU's range by what it has free before it
// starts (layer_split.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "examples/llm/compute/gpu_matmul.h"
#include "examples/llm/engine/residency_plan.h"
#include "examples/llm/engine/stream_slots.h"

namespace gpunvme::llm {

inline constexpr uint64_t kVramReserve = 512ull << 20;

// `slots`: GpuExecOptions::slots (0: auto), of which the RAM tier's buffers take ram_tier_depth (the
// streaming slots are host memory, stream_slots.h); `max_batch`: the largest pass, whose streamed layers
// are copied to GPU memory past kBatchTileTokens tokens.
inline uint64_t vram_kept_back(const std::vector<LayerBytes>& layers, uint32_t slots, uint32_t max_batch) {
  uint64_t widest = 0;
  for (const LayerBytes& l : layers) widest = std::max(widest, l.dense);
  const uint64_t buffers = ram_tier_depth(slots) + (max_batch > kBatchTileTokens ? 1 : 0);
  return buffers * widest + kVramReserve;
}

}  // namespace gpunvme::llm
