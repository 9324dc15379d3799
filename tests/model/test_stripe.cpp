// Striped sets (runtime/model/stripe.h): the logical -> member mapping against a block-by-block
// reference, the bytes of split extents, every way of giving the members wrongly, and generations.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <cstring>
#include <functional>
#include <memory>
#include <random>

#include "mem_device.h"
#include "runtime/model/crc32c.h"
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
  const std::vector<uint8_t> rec4k = serialize_stripe_record({make_stripe_geometry(2, 4096, 4096, 4096, 3), 0, {1, 3}});
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

namespace {

// A member's record rewritten: `edit` changes the header, the CRC is made right again.
void rewrite_record(MemDevice& d, const std::function<void(StripeHeader&)>& edit) {
  StripeHeader h;
  std::memcpy(&h, d.bytes.data(), sizeof h);
  edit(h);
  std::memset(d.bytes.data(), 0, d.io.lba_size);
  std::memcpy(d.bytes.data(), &h, sizeof h);
  if (h.header_bytes < sizeof h) std::memset(d.bytes.data() + h.header_bytes, 0, sizeof h - h.header_bytes);
  h.record_crc = 0;
  std::memcpy(d.bytes.data() + offsetof(StripeHeader, record_crc), &h.record_crc, 4);
  // The CRC as serialize_stripe_record computes it: over the block with the CRC field as zero.
  const uint32_t crc = crc32c(d.bytes.data(), d.io.lba_size);
  std::memcpy(d.bytes.data() + offsetof(StripeHeader, record_crc), &crc, 4);
}

void write_generation(Set& s, uint32_t member, StripeGeneration gen) {
  const std::vector<uint8_t> block = serialize_stripe_record({s.g, member, gen});
  s.devs[member]->put(0, block);
}

}  // namespace

TEST_CASE("stripe: the record carries the generation; every member must hold the same one") {
  Set a(3, 512, 4096, 1 << 16, 0xD);  // generation {1, 0xD}
  REQUIRE(parse_stripe_record(std::span(a.devs[2]->bytes).first(512), "m2").generation == StripeGeneration{1, 0xD});
  {
    StripeSet s(a.ios());
    CHECK(s.generation() == StripeGeneration{1, 0xD});
  }
  // Member 2 left at generation 1 while the others moved to 2: refused, naming it and both generations.
  write_generation(a, 0, {2, 77});
  write_generation(a, 2, {2, 77});
  const std::string older = error_of(a.ios());
  CHECK(has(older, "m1 (member 2) holds generation 1, older than generation 2 that m0 (member 1), m2 (member 3) hold"));
  CHECK(has(older, "saved before the set's latest deploy"));
  CHECK(has(older, "Re-deploy the model onto the whole set"));
  // Two older members are both named.
  write_generation(a, 1, {1, 0xD});
  write_generation(a, 2, {0, 0});
  CHECK(has(error_of(a.ios()), "m1 (member 2) holds generation 1 and m2 (member 3) generation 0 (written before "
                               "generations existed), older than generation 2 that m0 (member 1) holds: they were"));
  // One number reached by two deploys (copies of the set deployed apart): both named.
  write_generation(a, 1, {2, 78});
  write_generation(a, 2, {2, 77});
  CHECK(has(error_of(a.ios()), "m1 (member 2) and m0 (member 1) both hold generation 2, but from two different deploys"));
  // The deploy's layout check reads past it (a re-deploy is the fix), and the next generation passes them all.
  const std::vector<StripeRecord> recs = read_member_records(a.ios());
  REQUIRE(recs.size() == 3);
  CHECK(newest_generation(recs) == StripeGeneration{2, 78});
  const StripeGeneration next = next_generation(newest_generation(recs));
  CHECK(next.number == 3);
  CHECK(next_generation(std::nullopt).number == 1);
  CHECK(next_generation(std::nullopt).deploy_id != next_generation(std::nullopt).deploy_id);  // random, 64 bits
  write_stripe_records(a.ios(), a.g, next);
  StripeSet repaired(a.ios());
  CHECK(repaired.generation() == next);
  // A lone member names its generation (which backup is it?).
  CHECK_THROWS_WITH(detect_model(a.devs[1]->io), Catch::Matchers::ContainsSubstring("generation 3"));
}

TEST_CASE("stripe: a version-1 record (before generations) reads as generation 0; a newer version is refused") {
  Set a(2, 512, 4096, 1 << 16, 0xE);
  for (auto& d : a.devs)
    rewrite_record(*d, [](StripeHeader& h) {
      h.format_version = 1;
      h.header_bytes = 72;
    });
  const StripeRecord r = parse_stripe_record(std::span(a.devs[0]->bytes).first(512), "m0");
  CHECK(r.generation == StripeGeneration{});
  CHECK(r.geometry == a.g);
  CHECK(error_of(a.ios()).empty());  // a set laid by an older build still opens
  // One member re-deployed by this version: the version-1 one is older.
  write_generation(a, 0, next_generation(StripeGeneration{}));
  CHECK(has(error_of(a.ios()), "m1 (member 2) holds generation 0 (written before generations existed), older than generation 1"));
  // A version-1 header length with version 2, and a version this build does not know, are refused.
  rewrite_record(*a.devs[1], [](StripeHeader& h) { h.format_version = 2; });
  CHECK(has(error_of(a.ios()), "impossible fields"));
  rewrite_record(*a.devs[1], [](StripeHeader& h) {
    h.format_version = 3;
    h.header_bytes = 88;
  });
  CHECK(has(error_of(a.ios()), "format version 3; this build reads versions 1 and 2"));
}
