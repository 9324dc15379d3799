// PRP construction checked against the controller-side walker: for every offset/length class the
// walker must reproduce exactly the bytes' bus addresses, in order, including chained lists.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <cstring>
#include <map>
#include <vector>

#include "driver/prp.h"

using namespace gpunvme::nvme;

namespace {

// A fake bus: data pages are scattered (page k of the buffer lives at a non-contiguous address)
// so that a builder which assumes contiguity fails; list pages live in their own region.
struct FakeBus {
  uint64_t page;
  std::map<uint64_t, std::vector<uint64_t>> list_pages;  // bus -> entries
  uint64_t data_page_bus(uint64_t k) const { return 0x10'0000'0000ull + (k * 7919 % 100003) * page; }
  PrpListMemory list_page(uint32_t j) {
    const uint64_t bus = 0x90'0000'0000ull + uint64_t(j) * 3 * page;
    auto& v = list_pages[bus];
    v.assign(page / 8, 0xDEADBEEFDEADBEEFull);
    return PrpListMemory{v.data(), bus};
  }
  bool read(uint64_t addr, uint64_t* value) const {
    const uint64_t base = addr & ~(page - 1);
    auto it = list_pages.find(base);
    if (it == list_pages.end()) return false;
    *value = it->second[(addr - base) / 8];
    return true;
  }
};

struct Segment {
  uint64_t bus, len;
};

std::vector<Segment> expected_segments(const FakeBus& bus, uint64_t offset, uint64_t length) {
  std::vector<Segment> out;
  uint64_t pos = offset, left = length, k = 0;
  while (left > 0) {
    const uint64_t n = std::min(left, bus.page - (pos % bus.page));
    out.push_back({bus.data_page_bus(k) + pos % bus.page, n});
    pos += n;
    left -= n;
    ++k;
  }
  return out;
}

}  // namespace

TEST_CASE("PRP lists round trip for every offset/length class", "[driver][prp]") {
  const uint64_t page = GENERATE(4096ull, 8192ull);
  const uint64_t per_list = page / 8;
  const std::vector<uint64_t> offsets = {0, 4, 512, page / 2, page - 4};
  const std::vector<uint64_t> lengths = {
      4, 512, page - 4, page, page + 4, 2 * page, 2 * page + 512, 3 * page,
      (per_list)*page,            // list exactly filling one page
      (per_list + 1) * page,      // forces one chain
      (per_list + 2) * page + 512,
      (3 * per_list) * page + 4096,  // several chained list pages
  };
  for (uint64_t off : offsets) {
    for (uint64_t len : lengths) {
      if (len % 4) continue;
      FakeBus bus{page, {}};
      PrpPair prp;
      uint32_t list_pages_used = 0;
      REQUIRE(build_prps(
          off, len, page, [&](uint64_t k) { return bus.data_page_bus(k); },
          [&](uint32_t j) {
            list_pages_used = j + 1;
            return bus.list_page(j);
          },
          &prp));
      INFO("page " << page << " offset " << off << " length " << len);
      CHECK(list_pages_used == prp_list_pages(prp_list_entries(off, len, page), page));
      std::vector<Segment> got;
      const PrpWalkResult r = walk_prps(
          prp.prp1, prp.prp2, len, page, [&](uint64_t a, uint64_t* v) { return bus.read(a, v); },
          [&](uint64_t a, uint64_t n) {
            got.push_back({a, n});
            return true;
          });
      REQUIRE(r == PrpWalkResult::kOk);
      const auto want = expected_segments(bus, off, len);
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        CHECK(got[i].bus == want[i].bus);
        CHECK(got[i].len == want[i].len);
      }
      if (prp_pages_spanned(off, len, page) == 1) CHECK(prp.prp2 == 0);
    }
  }
}

TEST_CASE("list page counts include chain pointers", "[driver][prp]") {
  CHECK(prp_list_pages(0, 4096) == 0);
  CHECK(prp_list_pages(1, 4096) == 1);
  CHECK(prp_list_pages(512, 4096) == 1);
  CHECK(prp_list_pages(513, 4096) == 2);    // 511 + chain, then 2
  CHECK(prp_list_pages(1023, 4096) == 2);   // 511 + 512
  CHECK(prp_list_pages(1024, 4096) == 3);
  CHECK(prp_list_entries(0, 4096, 4096) == 0);
  CHECK(prp_list_entries(0, 8192, 4096) == 0);
  CHECK(prp_list_entries(4, 8192, 4096) == 2);  // 3 pages: PRP2 becomes a list
}

TEST_CASE("walker rejects bad offsets and unmapped lists", "[driver][prp]") {
  const uint64_t page = 4096;
  auto ok_seg = [](uint64_t, uint64_t) { return true; };
  auto no_read = [](uint64_t, uint64_t*) { return false; };
  CHECK(walk_prps(0x1002, 0, 512, page, no_read, ok_seg) == PrpWalkResult::kOffsetInvalid);
  CHECK(walk_prps(0x1000, 0x2010, 8192, page, no_read, ok_seg) == PrpWalkResult::kOffsetInvalid);  // PRP2 data ptr with offset
  CHECK(walk_prps(0x1000, 0x3004, 3 * page, page, no_read, ok_seg) == PrpWalkResult::kOffsetInvalid);  // list ptr not qword aligned
  CHECK(walk_prps(0x1000, 0x3000, 3 * page, page, no_read, ok_seg) == PrpWalkResult::kDmaFault);
  uint64_t entries[2] = {0x5000, 0x6010};  // second entry has an offset
  auto read = [&](uint64_t a, uint64_t* v) {
    *v = entries[(a - 0x3000) / 8];
    return true;
  };
  CHECK(walk_prps(0x1000, 0x3000, 3 * page, page, read, ok_seg) == PrpWalkResult::kOffsetInvalid);
  CHECK(walk_prps(0x1000, 0, 512, page, no_read, [](uint64_t, uint64_t) { return false; }) ==
        PrpWalkResult::kSegmentFault);
}

TEST_CASE("MDTS limits split commands", "[driver][prp]") {
  CHECK(max_transfer_bytes(0, 4096) == 0);
  CHECK(max_transfer_bytes(5, 4096) == 128 * 1024);
  CHECK(max_blocks_per_command(5, 4096, 512) == 256);
  CHECK(max_blocks_per_command(5, 4096, 4096) == 32);
  CHECK(max_blocks_per_command(0, 4096, 512) == 65536);
  CHECK(max_blocks_per_command(10, 4096, 512) == 8192);
  CHECK(max_blocks_per_command(15, 4096, 512) == 65536);  // NLB's 16 bits cap it
}
