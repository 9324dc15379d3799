// The GPU expert fetcher's part tables on a striped set (gpu_fetcher_parts.h), host side only: every
// part cut at stripe-unit boundaries into member pieces by the set's mapping, the read counts the
// fetcher sizes its command lists by, and the bytes: the pieces "read" from member images built from
// a logical image by the stripe's definition land where the part's logical bytes belong.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/model/model_error.h"
#include "runtime/model/stripe.h"
#include "runtime/stream/expert_layout.h"
#include "runtime/stream/gpu_fetcher_parts.h"

using namespace gpunvme;

namespace {

constexpr uint32_t kLba = 512;

// 2 layers x 5 experts x 3 parts at odd byte offsets, of sizes around `part_bytes`.
stream::ExpertCatalog catalog(uint64_t part_bytes) {
  stream::ExpertCatalog c;
  c.n_layers = 2;
  c.n_experts = 5;
  c.parts.resize(10);
  uint64_t off = 4096 + 13;
  for (size_t k = 0; k < c.parts.size(); ++k)
    for (uint32_t i = 0; i < 3; ++i) {
      const uint64_t len = part_bytes + 517 * i + 61 * k;
      const model::Projection proj = i == 0 ? model::Projection::kGate : i == 1 ? model::Projection::kUp : model::Projection::kDown;
      c.parts[k].push_back({proj, model::byte_range_to_extent(off, len, kLba, 0)});
      off += len + 300 + 7 * i;
    }
  return c;
}

stream::ExpertLayout layout(const stream::ExpertCatalog& c, uint64_t blocks) {
  stream::ExpertLayoutSpec spec;
  spec.lba_bytes = kLba;
  spec.namespace_blocks = blocks;
  spec.max_experts_per_fetch = 4;
  spec.max_parts = stream::kMaxExpertParts;
  return stream::ExpertLayout(c, spec, "test");
}

}  // namespace

TEST_CASE("GPU fetcher tables: a striped set's parts split into member pieces at stripe units, bytes where one drive's land",
          "[runtime][fetch][stripe]") {
  const uint32_t members = GENERATE(2u, 3u);
  const uint64_t unit_bytes = GENERATE(uint64_t(4096), uint64_t(64 << 10));
  const uint32_t max_blocks = GENERATE(8u, 256u);
  INFO(members << " members, unit " << unit_bytes << ", " << max_blocks << " blocks a read");
  const stream::ExpertCatalog cat = catalog(100 << 10);
  const model::StripeGeometry g = model::make_stripe_geometry(members, kLba, (8u << 20) / kLba, unit_bytes, 7);
  const stream::ExpertLayout lay = layout(cat, g.logical_blocks());
  const stream::FetcherPartTables one = stream::build_part_tables(cat, lay, max_blocks);
  const stream::FetcherPartTables t = stream::build_part_tables(cat, lay, max_blocks, &g);
  CHECK(one.pieces.empty());
  CHECK(one.piece_first.empty());
  // What consumers see of a part is the same: the split is in the reads only.
  REQUIRE(t.parts.size() == one.parts.size());
  CHECK(t.part_first == one.part_first);
  CHECK(t.packed == one.packed);
  CHECK(t.slices == one.slices);
  for (size_t p = 0; p < t.parts.size(); ++p) {
    CHECK(t.parts[p].lba == one.parts[p].lba);
    CHECK(t.parts[p].blocks == one.parts[p].blocks);
    CHECK(t.parts[p].dest_rel == one.parts[p].dest_rel);
    CHECK(t.parts[p].bytes == one.parts[p].bytes);
  }
  REQUIRE(t.piece_first.size() == t.parts.size() + 1);
  REQUIRE(t.piece_first.back() == t.pieces.size());

  // A logical image and its members, by the stripe's definition (stripe.h): logical block L is
  // member (L / unit) % N's block data_start + (L / unit / N) * unit + L % unit.
  const uint64_t logical_bytes = 4ull << 20;  // past the last part (about 3.2 MB)
  std::vector<uint8_t> logical(logical_bytes);
  std::mt19937 rng(members * 100 + max_blocks);
  for (auto& b : logical) b = uint8_t(rng());
  std::vector<std::vector<uint8_t>> member(members, std::vector<uint8_t>((g.data_start_lba + g.member_data_blocks) * kLba));
  for (uint64_t L = 0; L < logical_bytes / kLba; ++L) {
    const uint64_t s = L / g.unit_blocks;
    const uint64_t at = g.data_start_lba + (s / members) * g.unit_blocks + L % g.unit_blocks;
    std::memcpy(member[s % members].data() + at * kLba, logical.data() + L * kLba, kLba);
  }

  uint64_t max_reads = 0;
  for (size_t k = 0; k < cat.parts.size(); ++k) {
    uint64_t reads = 0;
    for (uint32_t p = t.part_first[k]; p < t.part_first[k + 1]; ++p) {
      const stream::GpuPart& part = t.parts[p];
      INFO("part " << p);
      // The pieces, in order, cover the part's blocks once; none crosses a stripe unit; each reads
      // its member's blocks that hold the logical ones.
      std::vector<uint8_t> slot(uint64_t(part.blocks) * kLba, 0);
      uint64_t next = 0;
      for (uint32_t q = t.piece_first[p]; q < t.piece_first[p + 1]; ++q) {
        const stream::GpuPiece& pc = t.pieces[q];
        CHECK(pc.block_offset == next);
        CHECK(pc.member < members);
        const uint64_t L = part.lba + pc.block_offset;
        CHECK(L / g.unit_blocks == (L + pc.blocks - 1) / g.unit_blocks);
        next += pc.blocks;
        reads += stream::reads_of(pc.blocks, max_blocks);
        std::memcpy(slot.data() + pc.block_offset * kLba, member[pc.member].data() + pc.lba * kLba, uint64_t(pc.blocks) * kLba);
      }
      CHECK(next == part.blocks);
      CHECK(std::memcmp(slot.data() + part.byte_in_first, logical.data() + part.lba * kLba + part.byte_in_first, part.bytes) == 0);
      // More than one member where the part spans more than one unit.
      if (uint64_t(part.blocks) > 2 * g.unit_blocks) CHECK(t.piece_first[p + 1] - t.piece_first[p] >= 2);
    }
    max_reads = std::max(max_reads, reads);
  }
  // The fetcher sizes every member's command list by this: the reads of the expert that needs the most.
  CHECK(t.max_cmds_per_expert == max_reads);
  CHECK(t.max_cmds_per_expert >= one.max_cmds_per_expert);
}

TEST_CASE("GPU fetcher tables: a set of one member is one namespace; a part past the logical volume is refused",
          "[runtime][fetch][stripe]") {
  const stream::ExpertCatalog cat = catalog(50 << 10);
  const model::StripeGeometry g1 = model::make_stripe_geometry(1, kLba, (8u << 20) / kLba, 4096, 9);
  const stream::ExpertLayout lay = layout(cat, g1.logical_blocks());
  const stream::FetcherPartTables t = stream::build_part_tables(cat, lay, 64, &g1);
  CHECK(t.pieces.empty());
  CHECK(t.max_cmds_per_expert == stream::build_part_tables(cat, lay, 64).max_cmds_per_expert);
  // A geometry smaller than the catalog: split_blocks names the set.
  model::StripeGeometry small = model::make_stripe_geometry(2, kLba, 2048 + 8, 4096, 9);  // 16 logical blocks
  CHECK_THROWS_AS(stream::build_part_tables(cat, lay, 64, &small), model::ModelError);
}
