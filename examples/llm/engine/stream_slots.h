// How many streaming slots a GPU's NVMe tier reads ahead into (GpuExecOptions::slots, `--slots`): the
// one decision, pure data, so the executor and a CPU test share it (tests/llm/test_layer_split.cpp).
//
// One GPU: 2, layer i + 1 read while layer i computes. The residency plan spreads the streamed layers
// over the model (residency_plan.h), so a drive rarely waits for a free slot there; more were not shown
// to help on one GPU.
//
// Several GPUs, one sequence: the GPUs run their layer ranges in turn, and a GPU's drive reads ahead
// only into its free slots. During the other GPUs' turns it fills them and idles; the rest of its
// streamed layers is read during its own turn, while the other drives idle in turn. With a drive per
// GPU that cost 39-46 % of the busiest drive's bound (2 x H200, the 70B-shaped Q6_K at 22 GiB each, 7
// layers streamed per GPU, 2 slots: 61 % on pcie4, 54 % on pcie5; 4 slots: 66 % on pcie5). With a slot
// per streamed layer the drive reads on through the other GPUs' turns and a token needs only the
// busiest drive's time. So auto gives each GPU of a pipeline a slot per streamed layer, capped by what
// a slot really costs:
//  - host memory: a slot is the widest streamed layer in pinned, GPU-mapped host memory (the GPU reads
//    it over its link; no VRAM), so the slots take at most the executor's share of host memory
//    (`host_share`: slot_host_share, below);
//  - GPU memory: the streamer keeps every (streamed layer, slot)'s NVMe command templates in GPU memory
//    (64 bytes per command: 7 layers of 0.7 GB in 128 KiB commands, 2.4 MB a slot), so the slots past
//    the default two take at most kSlotTemplateVram, a part of the executor's reserve (vram_reserve.h);
//  - the streamer's most, 64.
// Never fewer than the default 2. The RAM tier's GPU buffers do cost VRAM (a widest layer each), so
// they keep the default depth under auto (ram_tier_depth). An explicit `--slots N` (1..64) sets both,
// as before.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>

namespace gpunvme::llm {

inline constexpr uint32_t kDefaultStreamSlots = 2;
inline constexpr uint32_t kMaxStreamSlots = 64;               // LayerStreamer's most
inline constexpr uint64_t kSlotTemplateVram = 64ull << 20;    // command templates of the slots past the default

struct StreamSlotInputs {
  uint32_t asked = 0;            // --slots N; 0: auto
  bool pipeline = false;         // a GPU of several, running its range in turn with the others
  uint32_t streamed_layers = 0;  // this GPU's NVMe-tier layers
  uint64_t slot_bytes = 0;       // one slot's pinned host bytes
  uint64_t template_bytes = 0;   // one slot's command templates in GPU memory (every streamed layer's)
  uint64_t host_share = 0;       // host memory this GPU's slots may take
};

// The slots for `in` (the rule above).
inline uint32_t stream_slots(const StreamSlotInputs& in) {
  if (in.asked) return in.asked;
  if (!in.pipeline || in.streamed_layers <= kDefaultStreamSlots) return kDefaultStreamSlots;
  uint64_t n = std::min<uint64_t>(in.streamed_layers, kMaxStreamSlots);
  if (in.slot_bytes) n = std::min<uint64_t>(n, in.host_share / in.slot_bytes);
  if (in.template_bytes) n = std::min<uint64_t>(n, kDefaultStreamSlots + kSlotTemplateVram / in.template_bytes);
  return uint32_t(std::max<uint64_t>(n, kDefaultStreamSlots));
}

// The host memory each of `gpus` GPUs' streaming slots may pin, from what the kernel can give before
// any GPU starts (`available`, MemAvailable; nullopt: unknown, none) and the RAM budget (its tier and
// expert cache are pinned as the GPUs start): a quarter of what is past the budget, split evenly. A
// quarter: pinned memory cannot be paged out, and the rest stays the page cache's, a generated drive's
// and other processes'.
inline uint64_t slot_host_share(std::optional<uint64_t> available, uint64_t ram_budget, uint32_t gpus) {
  return available && *available > ram_budget && gpus ? (*available - ram_budget) / 4 / gpus : 0;
}

// The RAM tier's GPU buffers (RamTier's depth) for `--slots` (0: auto): each holds a widest layer in
// VRAM, so auto keeps the default; an explicit count sets them too.
inline uint32_t ram_tier_depth(uint32_t asked) { return asked ? asked : kDefaultStreamSlots; }

}  // namespace gpunvme::llm
