// Command plans: every template's PRPs, walked as the controller walks them (driver/prp.h
// walk_prps), describe exactly the destination bytes the plan says; splits respect the block
// limit and the PRP table's one window rule; layer extents from an LbaMap.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "driver/prp.h"
#include "host/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/plan/command_plan.h"
#include "runtime/plan/extent_rules.h"
#include "runtime/plan/prp_table.h"
#include "model_fixture.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr uint64_t kDestBase = 0x40000000ull;
constexpr uint64_t kListBase = 0x900000000ull;

// Walks one command and checks the segments are exactly dest bytes [offset, offset + length),
// in order, through translation `t`. Returns false with the first wrong segment otherwise.
bool walks_to(const plan::PrpTable& table, const host::DmaTranslation& t, uint64_t prp1, uint64_t prp2, uint64_t offset,
              uint64_t length, std::string* why) {
  uint64_t pos = offset;
  const auto r = nvme::walk_prps(
      prp1, prp2, length, table.page(), [&](uint64_t bus, uint64_t* v) { return table.read_entry(bus, v); },
      [&](uint64_t bus, uint64_t len) {
        // Each segment must be the bus image of the next `len` destination bytes.
        for (uint64_t done = 0; done < len;) {
          const uint64_t run = std::min(len - done, t.contiguous_bytes_from(pos, len - done));
          if (t.bus(pos) != bus + done) {
            *why = "segment at bus " + std::to_string(bus + done) + " expected " + std::to_string(t.bus(pos)) +
                   " (dest offset " + std::to_string(pos) + ")";
            return false;
          }
          pos += run;
          done += run;
        }
        return true;
      });
  if (r != nvme::PrpWalkResult::kOk) {
    if (why->empty()) *why = "walk_prps result " + std::to_string(int(r));
    return false;
  }
  if (pos != offset + length) {
    *why = "walk covered " + std::to_string(pos - offset) + " of " + std::to_string(length) + " bytes";
    return false;
  }
  return true;
}

}  // namespace

TEST_CASE("PRP table: every window it accepts walks to exactly its bytes", "[runtime][plan]") {
  const uint64_t page = GENERATE(512ull, 4096ull);
  const uint64_t per = page / 8 - 1;
  const uint64_t pages = per * 3 + 17;  // three chain crossings
  const auto t = host::DmaTranslation::contiguous(kDestBase);
  const auto table = plan::PrpTable::in_host_memory(t, pages * page, page, kListBase);
  CHECK(table.list_bytes() == 4 * page);
  uint64_t accepted = 0, refused = 0;
  // Every start page, every length in pages up to 2 list pages, a few in-page offsets.
  for (uint64_t p = 0; p < pages; p += (p % per < 3 || p % per > per - 4) ? 1 : 7) {
    for (uint64_t off : {uint64_t(0), uint64_t(4), page - 4}) {
      for (uint64_t n = 1; n <= 2 * per + 3; n += (n < 6 || n % per < 3 || n % per > per - 3) ? 1 : 13) {
        const uint64_t offset = p * page + off;
        const uint64_t length = n * page - off - (n % 3 == 0 ? 4 : 0);
        if (length == 0 || offset + length > pages * page) continue;
        if (!table.command_fits(offset, length)) {
          ++refused;
          // The refused windows are exactly those ending in slot 0 of a list page reached through a chain slot.
          const uint64_t q = (offset + length - 1) / page;
          CHECK(q % per == 0);
          CHECK(q >= p + 2);
          continue;
        }
        ++accepted;
        const nvme::PrpPair prp = table.prps(offset, length);
        std::string why;
        INFO("page " << page << " offset " << offset << " length " << length);
        REQUIRE(walks_to(table, t, prp.prp1, prp.prp2, offset, length, &why));
      }
    }
  }
  CHECK(accepted > 1000);
  CHECK(refused > 0);
}

TEST_CASE("PRP table: the refused window really is misread by a controller (the rule is needed)", "[runtime][plan]") {
  const uint64_t page = 4096, per = page / 8 - 1;
  const auto t = host::DmaTranslation::contiguous(kDestBase);
  const auto table = plan::PrpTable::in_host_memory(t, 3 * per * page, page, kListBase);
  // Data pages p..q with q = per (slot 0 of list page 1), p = per - 5: the walker meets the chain
  // slot with exactly one page left and takes the chain pointer for data.
  const uint64_t offset = (per - 5) * page, length = 6 * page;
  REQUIRE_FALSE(table.command_fits(offset, length));
  const nvme::PrpPair prp = table.prps(offset, length);
  std::string why;
  CHECK_FALSE(walks_to(table, t, prp.prp1, prp.prp2, offset, length, &why));
  CHECK_FALSE(why.empty());
}

TEST_CASE("PRP table over a chunked (no-IOMMU) destination", "[runtime][plan]") {
  // 2 MiB chunks at scattered bus addresses, as hugepages are without an IOMMU.
  const uint64_t page = 4096, chunk_shift = 21, chunks = 6;
  std::vector<uint64_t> bus;
  for (uint64_t i = 0; i < chunks; ++i) bus.push_back(0x100000000ull + ((i * 7) % chunks) * (5ull << 21));
  const auto t = host::DmaTranslation::chunked(bus, chunk_shift);
  const auto table = plan::PrpTable::in_host_memory(t, chunks << chunk_shift, page, kListBase);
  plan::PlanGeometry g{1, 512, 2048};  // 1 MiB per command
  std::vector<model::Extent> ex = {{100, 5000, 17, 5000 * 512 - 100}, {9000, 7, 0, 3584}, {20000, 12001, 511, 12000 * 512}};
  const plan::CommandPlan p = plan::build_plan(ex, g, table, page);
  REQUIRE(p.pieces.size() == 3);
  for (const auto& c : p.commands) {
    // Recover the destination offset of the command from its first block.
    const uint64_t slba = nvme::rw_slba(c);
    const auto dest = p.locate(slba * 512, 512);
    REQUIRE(dest);
    std::string why;
    INFO("slba " << slba);
    REQUIRE(walks_to(table, t, c.prp1, c.prp2, *dest, uint64_t(nvme::rw_nblocks(c)) * 512, &why));
  }
}

TEST_CASE("plans: splits by the block limit, covers every block once, exposes byte offsets", "[runtime][plan]") {
  const uint32_t lba = GENERATE(512u, 4096u);
  const uint32_t max_blocks = GENERATE(1u, 7u, 32u, 256u, 65536u);
  const uint64_t page = 4096;
  std::mt19937_64 rng(lba * 31 + max_blocks);
  std::vector<model::Extent> ex;
  uint64_t lba_at = 3;
  for (int i = 0; i < 40; ++i) {
    model::Extent e;
    e.first_lba = lba_at;
    e.lba_count = 1 + rng() % (i % 5 == 0 ? 3000 : 40);
    e.byte_in_first = uint32_t(rng() % lba);
    // 1..room bytes: the extent rules (extent_rules.h) keep the bytes inside the blocks.
    const uint64_t room = e.lba_count * lba - e.byte_in_first;
    e.byte_length = room - rng() % room;
    ex.push_back(e);
    lba_at += e.lba_count + rng() % 3;
  }
  const uint64_t bytes = plan::packed_bytes(ex, lba, page);
  const auto t = host::DmaTranslation::contiguous(kDestBase);
  const auto table = plan::PrpTable::in_host_memory(t, bytes, page, kListBase);
  const plan::PlanGeometry g{1, lba, max_blocks};
  const plan::CommandPlan p = plan::build_plan(ex, g, table, page);
  REQUIRE(p.pieces.size() == ex.size());
  uint64_t total = 0;
  for (size_t i = 0; i < ex.size(); ++i) {
    const plan::Piece& pc = p.pieces[i];
    CHECK(pc.dest_offset % page == 0);
    CHECK(pc.data_offset == pc.dest_offset + ex[i].byte_in_first);
    uint64_t next_lba = ex[i].first_lba, dest = pc.dest_offset;
    for (uint32_t c = pc.first_command; c < pc.first_command + pc.n_commands; ++c) {
      const auto& e = p.commands[c];
      CHECK(e.opcode == nvme::nvm_op::kRead);
      CHECK(e.nsid == 1);
      CHECK(e.cid == 0);
      CHECK(nvme::rw_slba(e) == next_lba);
      const uint32_t n = nvme::rw_nblocks(e);
      CHECK(n <= max_blocks);
      std::string why;
      REQUIRE(walks_to(table, t, e.prp1, e.prp2, dest, uint64_t(n) * lba, &why));
      next_lba += n;
      dest += uint64_t(n) * lba;
    }
    CHECK(next_lba == ex[i].end_lba());
    total += ex[i].lba_count * lba;
  }
  CHECK(p.read_bytes == total);
  CHECK(p.dest_bytes <= bytes);
}

TEST_CASE("plans: refuse a destination that is too small", "[runtime][plan]") {
  const auto t = host::DmaTranslation::contiguous(kDestBase);
  const auto table = plan::PrpTable::in_host_memory(t, 8192, 4096, kListBase);
  std::vector<model::Extent> ex = {{0, 17, 0, 17 * 512}};
  CHECK_THROWS_AS(plan::build_plan(ex, plan::PlanGeometry{1, 512, 8}, table, 4096), Error);
}

TEST_CASE("layer extents from an LbaMap: one merged run per layer, experts optionally left out", "[runtime][plan]") {
  const auto bytes = rt_test::moe_model(3, 4);
  const auto f = gguf::GgufFile::parse(bytes);
  const model::LbaMap map(f, 512, 256);
  const auto all = plan::layer_extents(map, false);
  const auto dense = plan::layer_extents(map, true);
  REQUIRE(all.size() == 3);
  for (uint32_t l = 0; l < 3; ++l) {
    REQUIRE(all[l].size() == 1);  // tensors of a layer are adjacent in the file
    CHECK(all[l][0] == map.layer(l)->extent);
    // Without experts: only attn_q and ffn_gate_inp remain, still one run, smaller.
    REQUIRE(dense[l].size() == 1);
    CHECK(dense[l][0].byte_length < all[l][0].byte_length);
    const auto* q = map.find("blk." + std::to_string(l) + ".attn_q.weight");
    CHECK(dense[l][0].first_lba == q->extent.first_lba);
    CHECK(dense[l][0].byte_in_first == q->extent.byte_in_first);
  }
}

TEST_CASE("extent rules: blocks inside the namespace, bytes inside the blocks", "[runtime][plan][extents]") {
  const uint64_t ns = 1000;
  auto problem = [&](model::Extent e) { return plan::extent_problem(e, 512, ns); };
  CHECK(problem({10, 2, 0, 1024}).empty());
  CHECK(problem({10, 2, 511, 513}).empty());
  CHECK(problem({998, 2, 0, 0}).empty());
  CHECK(problem({0, 0, 0, 0}).empty());  // an empty extent reads nothing
  // Issue #18, item 1: a block range that wraps past 2^64 (its end looks small) and one that runs past the end.
  CHECK_THAT(problem({10, UINT64_MAX - 4, 0, 512}), ContainsSubstring("wraps past"));
  CHECK_THAT(problem({UINT64_MAX - (1ull << 55) + 1, (1ull << 55) + 8, 0, 512}), ContainsSubstring("wraps past"));
  CHECK_THAT(problem({999, 2, 0, 512}), ContainsSubstring("past the end of the namespace"));
  // Issue #18, item 2: bytes that do not fit their blocks.
  CHECK_THAT(problem({100, 1, 0, 1ull << 30}), ContainsSubstring("end past its last block"));
  CHECK_THAT(problem({100, 1, 512, 1}), ContainsSubstring("not inside the first block"));
  CHECK_THAT(problem({100, 2, 1, 1024}), ContainsSubstring("end past its last block"));
  CHECK_THAT(problem({100, 0, 0, 1}), ContainsSubstring("end past its last block"));
  CHECK_THROWS_WITH(plan::check_extent({100, 1, 0, 1ull << 30}, 512, ns, "layer 3"),
                    ContainsSubstring("layer 3: 1073741824 bytes"));
}

TEST_CASE("plans: an extent whose bytes overrun its blocks is refused before any command is built", "[runtime][plan][extents]") {
  const auto t = host::DmaTranslation::contiguous(kDestBase);
  const auto table = plan::PrpTable::in_host_memory(t, 1 << 20, 4096, kListBase);
  plan::CommandPlan p;
  CHECK_THROWS_WITH(plan::append_extent(p, {100, 1, 0, 1ull << 30}, 0, plan::PlanGeometry{1, 512, 8}, table),
                    ContainsSubstring("end past its last block"));
  plan::PlanGeometry g{1, 512, 8};
  g.namespace_blocks = 50;
  CHECK_THROWS_WITH(plan::append_extent(p, {45, 8, 0, 4096}, 0, g, table), ContainsSubstring("past the end"));
  CHECK(p.commands.empty());
  CHECK(p.pieces.empty());
}
