// The GPU executor's KV cache: its shape, its bytes and the one message for a cache that does not fit.
// One arithmetic for GpuForward's allocation and the residency plan's accounting (residency_plan.h),
// so the plan never counts a cache of another size than the one allocated.
#pragma once
#include <cstdint>
#include <string>

#include "examples/llm/model/config.h"
#include "host/text/human_bytes.h"

namespace gpunvme::llm {

// The KV cache a GpuForward keeps: layers [first, end) only (end 0: to the last; a GPU of several runs
// its range alone), `seqs` sequence slots of n_ctx positions each (pass_tokens.h), laid out
// [layer][slot][position][kv_dim] in f16. In GPU memory, or with `host` in pinned host memory mapped
// into the GPU (FlexGen's trade: more sequences than VRAM holds caches for, each attention reading its
// slot's rows over the host link: a decode token's reads are its context's K and V once per layer).
struct KvCacheShape {
  uint32_t first = 0, end = 0;
  uint32_t seqs = 1;
  bool host = false;
};

// K and V of one slot of n_ctx positions over `layers` layers, f16.
inline uint64_t kv_slot_bytes(const ModelConfig& c, uint32_t layers, uint32_t n_ctx) {
  return 2 * uint64_t(layers) * n_ctx * c.kv_dim() * sizeof(uint16_t);
}
// The whole cache of `kv` (its end 0: to the last layer).
inline uint64_t kv_cache_bytes(const ModelConfig& c, const KvCacheShape& kv, uint32_t n_ctx) {
  const uint32_t end = kv.end ? kv.end : c.n_layer;
  return uint64_t(kv.seqs) * kv_slot_bytes(c, end > kv.first ? end - kv.first : 0, n_ctx);
}

// "the KV cache (S sequence(s) of C positions, B bytes) does not fit in GPU memory (or pinned host
// memory): WHY; " and the fixes a user has: fewer sequences (not for one), a shorter context, the cache
// in host memory, a larger VRAM budget (those of GPU memory only where the cache is there). One
// sequence is also what the `llm` tool runs, which has no --kv-host: that fix names the tools that do.
inline std::string kv_does_not_fit(uint32_t seqs, uint32_t n_ctx, uint64_t bytes, bool host, const std::string& why) {
  const std::string head = "the KV cache (" + std::to_string(seqs) + " sequence(s) of " + std::to_string(n_ctx) + " positions, " +
                           text::human_bytes(double(bytes)) + ") does not fit in " + (host ? "pinned host memory" : "GPU memory") + ": " + why;
  if (host) return head + "; fixes: fewer sequences (--max-seqs), a shorter context (--ctx)";
  if (seqs <= 1)
    return head + "; fixes: a shorter context (--ctx), a larger --vram-budget, or the cache in pinned host memory (--kv-host of "
                  "llm_seqs and gpunvme.serve)";
  return head + "; fixes: fewer sequences (--max-seqs), a shorter context (--ctx), the cache in pinned host memory "
                "(--kv-host), or a larger --vram-budget";
}

}  // namespace gpunvme::llm
