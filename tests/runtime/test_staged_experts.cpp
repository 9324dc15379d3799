// The staged experts' layout (gpu_fetch_types.h: StagedExperts, staged_offset), host side: the one rule
// by which the engine's copy kernels write a fetch's experts into VRAM and its product kernels and the
// load check read them there (examples/llm/compute/gpu_expert_stage.h). Bytes "copied" from a
// scratchpad image by the rule land inside their expert's stride, at their scratchpad address mod 4096,
// without touching another expert's, and read back equal; for cache slots and for packed experts at
// odd offsets.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "runtime/stream/gpu_fetch_types.h"

using namespace gpunvme;

namespace {

struct FreeBytes {
  void operator()(uint8_t* q) const { std::free(q); }
};
struct Aligned {  // page-aligned, as the scratchpad and the staging buffers are
  explicit Aligned(size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(stream::kStagedAlign, (n + 4095) / 4096 * 4096))) {}
  std::unique_ptr<uint8_t, FreeBytes> p;
};

// Distinct experts of a fetch: first byte `offset` in the scratchpad, three parts inside, `span` bytes.
std::vector<stream::GpuFetchedExpert> fetch_of(const std::vector<uint64_t>& offsets, uint64_t span) {
  std::vector<stream::GpuFetchedExpert> out;
  for (uint64_t off : offsets) {
    stream::GpuFetchedExpert e;
    e.offset = off, e.bytes = span, e.part_count = 3;
    const uint64_t part = (span - 700) / 3;
    for (uint32_t i = 0; i < 3; ++i) {
      e.part_proj[i] = i;
      e.part_offset[i] = off + 100 + i * (part + 200);  // gaps and odd starts, as extents have
      e.part_bytes[i] = part;
    }
    out.push_back(e);
  }
  return out;
}

void check_layout(const std::vector<stream::GpuFetchedExpert>& ex, uint64_t slot, uint64_t scratch_bytes) {
  Aligned scratch(scratch_bytes);
  std::mt19937_64 rng(7);
  for (uint64_t i = 0; i < scratch_bytes; ++i) scratch.p.get()[i] = uint8_t(rng());
  // The engine's stride: a slot rounded up to 4096, plus 4096 for the offset mod 4096 kept.
  const uint64_t stride = (slot + 4095) / 4096 * 4096 + 4096;
  const stream::StagedExperts st{nullptr, stride, 0, 0};
  Aligned staged(stride * ex.size());
  std::vector<int> owner(stride * ex.size(), -1);
  for (uint32_t d = 0; d < ex.size(); ++d)
    for (uint32_t p = 0; p < ex[d].part_count; ++p)
      for (uint64_t b = 0; b < ex[d].part_bytes[p]; ++b) {
        const uint64_t from = ex[d].part_offset[p] + b, to = stream::staged_offset(st, d, ex[d], from);
        REQUIRE(to >= d * stride);
        REQUIRE(to < (d + 1) * stride);                // inside its own expert's stride
        REQUIRE(to % 4096 == from % 4096);             // the scratchpad's alignment, for the kernels' paths
        REQUIRE(owner[to] == -1);                      // no byte written twice, by no other expert
        owner[to] = int(d);
        staged.p.get()[to] = scratch.p.get()[from];
      }
  for (uint32_t d = 0; d < ex.size(); ++d)  // read back where the product and the check read it
    for (uint32_t p = 0; p < ex[d].part_count; ++p) {
      const uint64_t at = stream::staged_offset(st, d, ex[d], ex[d].part_offset[p]);
      CHECK(std::equal(staged.p.get() + at, staged.p.get() + at + ex[d].part_bytes[p], scratch.p.get() + ex[d].part_offset[p]));
    }
}

}  // namespace

TEST_CASE("staged experts: cache slots' bytes land in their own stride at their address mod 4096, and read back equal") {
  const uint64_t slot = 3 * 4096 + 1024;  // an expert's slot, not a whole number of pages
  // Slots 5, 0 and 2 of a cache, in fetch order (distinct index d is not the slot).
  check_layout(fetch_of({5 * slot, 0, 2 * slot}, slot - 128), slot, 6 * slot);
}

TEST_CASE("staged experts: packed experts at odd offsets (no cache) keep every byte too") {
  const uint64_t span = 9000;
  check_layout(fetch_of({512, 512 + span + 1536, 512 + 2 * (span + 1536) + 7}, span), span + 512, 4 * (span + 2048));
}
