// Striped sets (runtime/model/stripe.h): the logical -> member mapping against a block-by-block
// reference, the bytes of split extents, and every way of giving the members wrongly.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <memory>
#include <random>

#include "mem_device.h"
#include "runtime/model/deploy_record.h"
#include "runtime/model/detect.h"
#include "runtime/model/model_error.h"
#include "runtime/model/stripe.h"

using namespace gpunvme::model;
using model_test::MemDevice;

namespace {

struct Set {
  std::vector<std::unique_ptr<MemDevice>> devs;
  StripeGeometry g;
  Set(uint32_t n, uint32_t lba, uint64_t blocks, uint64_t unit_bytes, uint64_t id) {
    for (uint32_t i = 0; i < n; ++i) {
      devs.push_back(std::make_unique<MemDevice>(lba, blocks));
      devs.back()->io.name = "m" + std::to_string(i);
    }
    g = make_stripe_geometry(n, lba, blocks, unit_bytes, id);
    write_stripe_records(ios(), g, {1, id});
  }
  std::vector<BlockIo> ios(std::vector<uint32_t> order = {}) const {
    if (order.empty())
      for (uint32_t i = 0; i < devs.size(); ++i) order.push_back(i);
    std::vector<BlockIo> v;
    for (uint32_t i : order) v.push_back(devs[i]->io);
    return v;
  }
};

std::string error_of(std::vector<BlockIo> members) {
  try {
    StripeSet s(std::move(members));
  } catch (const ModelError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("stripe: split_blocks maps every block as the RAID-0 rule says") {
  for (uint32_t n : {1u, 2u, 3u, 4u}) {
    const StripeGeometry g = make_stripe_geometry(n, 512, 2048 + 64 * 8, 8 * 512, 7);
    REQUIRE(g.data_start_lba == 2048);
    REQUIRE(g.member_data_blocks == 64 * 8);
    std::mt19937_64 rng(n);
    for (int trial = 0; trial < 300; ++trial) {
      const uint64_t lba = rng() % g.logical_blocks();
      const uint64_t count = 1 + rng() % std::min<uint64_t>(100, g.logical_blocks() - lba);
      const auto pieces = split_blocks(g, lba, count);
      uint64_t covered = 0;
      for (const StripePiece& p : pieces) {
        REQUIRE(p.block_offset == covered);
        for (uint64_t k = 0; k < p.lba_count; ++k) {
          const uint64_t L = lba + p.block_offset + k;  // the reference: one block at a time
          const uint64_t s = L / 8;
          REQUIRE(p.member == s % n);
          REQUIRE(p.first_lba + k == 2048 + (s / n) * 8 + L % 8);
        }
        covered += p.lba_count;
      }
      REQUIRE(covered == count);
    }
  }
  const StripeGeometry g = make_stripe_geometry(2, 512, 4096, 4096, 1);
  REQUIRE_THROWS_AS(split_blocks(g, g.logical_blocks() - 1, 2), ModelError);
}

TEST_CASE("stripe: the logical volume holds the bytes, and split extents carry exactly them") {
  for (uint32_t lba : {512u, 4096u}) {
    Set set(3, lba, (1u << 20) / lba + 96, 4 * 4096, 42);
    StripeSet s(set.ios());
    const BlockIo& v = s.logical();
    std::vector<uint8_t> data(v.n_lbas * lba);
    std::mt19937 rng(lba);
    for (auto& b : data) b = uint8_t(rng());
    v.write(0, uint32_t(v.n_lbas), data.data());
    std::vector<uint8_t> back(data.size());
    v.read(0, uint32_t(v.n_lbas), back.data());
    REQUIRE(back == data);
    // No member's record was overwritten, and member data sits where split_blocks says.
    REQUIRE(is_stripe_member(set.devs[1]->io));
    for (int trial = 0; trial < 200; ++trial) {
      const uint64_t off = rng() % (data.size() - 1);
      const uint64_t len = 1 + rng() % std::min<uint64_t>(data.size() - off, 100000);
      const Extent e = byte_range_to_extent(off, len, lba, 0);
      std::vector<uint8_t> dest(e.lba_count * lba, 0xEE);
      uint64_t bytes = 0;
      const auto parts = split_extent(s.geometry(), e);
      for (uint32_t m = 0; m < 3; ++m)
        for (const MemberExtent& me : parts[m]) {
          set.devs[m]->io.read(me.extent.first_lba, uint32_t(me.extent.lba_count), dest.data() + me.block_offset * lba);
          bytes += me.extent.byte_length;
        }
      REQUIRE(bytes == len);
      REQUIRE(std::equal(data.begin() + off, data.begin() + off + len, dest.begin() + e.byte_in_first));
    }
  }
}

TEST_CASE("stripe: members given wrongly are refused with the fix") {
  Set a(3, 512, 4096, 1 << 16, 0xA);
  Set b(3, 512, 4096, 1 << 16, 0xB);
  REQUIRE(error_of(a.ios()).empty());
  const std::string order = error_of(a.ios({1, 0, 2}));
  CHECK(has(order, "m1 is given as member 1 but is member 2 of striped set"));
  CHECK(has(order, "--device m0 --device m1 --device m2"));
  CHECK(has(error_of(a.ios({0, 1})), "1 member(s) missing"));
  CHECK(has(error_of(a.ios({0, 1, 1})), "given twice"));
  std::vector<BlockIo> mixed = a.ios();
  mixed[2] = b.devs[2]->io;
  mixed[2].name = "other";
  CHECK(has(error_of(mixed), "different sets"));
  MemDevice plain(512, 4096);
  plain.io.name = "plain";
  std::vector<BlockIo> with_plain = a.ios({0, 1});
  with_plain.push_back(plain.io);
  CHECK(has(error_of(with_plain), "plain is not a member of a striped set"));
  // A single-drive deploy record is named as such.
  DeployRecord r;
  r.model_start_lba = 2048;
  r.model_bytes = 1000;
  r.name = "x";
  r.chunk_crcs = {0};
  plain.put(0, serialize_record(r));
  CHECK(has(error_of({plain.io, a.devs[1]->io}), "single-drive deploy"));
  // A member smaller than the set says (truncated image).
  std::vector<BlockIo> small = a.ios();
  small[1].n_lbas -= 1;
  CHECK(has(error_of(small), "truncated or resized"));
  // A member read with another LBA size than it was written with.
  const std::vector<uint8_t> rec4k = serialize_stripe_record({make_stripe_geometry(2, 4096, 4096, 4096, 3), 0});
  CHECK_THROWS_WITH(parse_stripe_record(std::span(rec4k).first(512), "dev"),
                    Catch::Matchers::ContainsSubstring("written with 4096-byte blocks but the device has 512-byte"));
  // A damaged record.
  a.devs[2]->bytes[20] ^= 1;
  CHECK(has(error_of(a.ios()), "damaged"));
}

TEST_CASE("stripe: one member alone is refused by detect_model, naming the set") {
  Set a(2, 512, 4096, 1 << 16, 0xC);
  try {
    detect_model(a.devs[1]->io);
    FAIL("a lone member was accepted");
  } catch (const ModelError& e) {
    CHECK(has(e.what(), "m1 is member 2 of striped set"));
    CHECK(has(e.what(), "give all 2 members"));
  }
}

TEST_CASE("stripe: bad geometry is refused") {
  CHECK_THROWS_AS(make_stripe_geometry(2, 4096, 1 << 20, 6 * 1024, 1), ModelError);  // not a multiple of 4 KiB
  CHECK_THROWS_AS(make_stripe_geometry(2, 512, 1 << 20, 0, 1), ModelError);
  CHECK_THROWS_AS(make_stripe_geometry(17, 512, 1 << 20, 4096, 1), ModelError);
  CHECK_THROWS_AS(make_stripe_geometry(2, 512, 2048 + 7, 4096, 1), ModelError);  // no room for one unit
  Set a(2, 512, 4096, 4096, 1);
  MemDevice other(4096, 4096);
  std::vector<BlockIo> mixed = {a.devs[0]->io, other.io};
  CHECK_THROWS_AS(write_stripe_records(mixed, a.g, {1, 1}), ModelError);  // LBA sizes differ
}
