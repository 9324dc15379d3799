// CRC-32C against published check values (RFC 3720 B.4, the "123456789" check), sw == hw (also past
// the hardware path's three-stream blocks), and the combine operation against whole buffers.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "runtime/model/crc32c.h"
#include "runtime/model/crc32c_math.h"

using namespace gpunvme::model;

TEST_CASE("crc32c known values", "[crc32c]") {
  const char* check = "123456789";
  CHECK(crc32c(check, 9) == 0xE3069283u);
  CHECK(crc32c_sw(check, 9) == 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<uint8_t>(i);
    dec[i] = static_cast<uint8_t>(31 - i);
  }
  CHECK(crc32c_sw(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(crc32c_sw(ones.data(), 32) == 0x62A8AB43u);
  CHECK(crc32c_sw(inc.data(), 32) == 0x46DD794Eu);
  CHECK(crc32c_sw(dec.data(), 32) == 0x113FDB5Cu);
  CHECK(crc32c(nullptr, 0) == 0);
}

TEST_CASE("crc32c: hardware and slice-by-8 agree, chaining works", "[crc32c]") {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(40000 + 16);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t off = 0; off < 9; ++off) {
    for (size_t len : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 1000u, 4096u, 12288u, 12289u, 40000u}) {
      INFO(off << " " << len);
      CHECK(crc32c(buf.data() + off, len) == crc32c_sw(buf.data() + off, len));
      size_t cut = len / 3;
      CHECK(crc32c(buf.data() + off + cut, len - cut, crc32c(buf.data() + off, cut)) ==
            crc32c_sw(buf.data() + off, len));
    }
  }
  INFO("hardware CRC32C: " << (crc32c_has_hw() ? "yes" : "no"));
  SUCCEED();
}

// Property: a buffer cut at random points into pieces, each CRC'd from 0, combined left to right,
// gives crc32c() of the whole buffer; and a wrong length or a flipped bit does not.
TEST_CASE("crc32c_combine: random splits give the whole buffer's CRC", "[crc32c]") {
  std::mt19937_64 rng(11);
  std::vector<uint8_t> buf(1 << 20);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (int round = 0; round < 200; ++round) {
    const size_t len = round < 20 ? rng() % 64 : rng() % buf.size();
    const size_t off = rng() % (buf.size() - len + 1);
    const uint32_t whole = crc32c(buf.data() + off, len);
    const size_t n_cuts = rng() % 12;
    std::vector<size_t> cuts{0, len};
    for (size_t i = 0; i < n_cuts; ++i) cuts.push_back(len ? rng() % (len + 1) : 0);
    std::sort(cuts.begin(), cuts.end());
    uint32_t c = 0;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      const size_t a = cuts[i], n = cuts[i + 1] - a;  // empty pieces included
      c = crc32c_combine(c, crc32c_sw(buf.data() + off + a, n), n);
    }
    INFO("round " << round << ": " << len << " bytes in " << cuts.size() - 1 << " pieces");
    REQUIRE(c == whole);
    if (len >= 2) {
      const size_t a = cuts[cuts.size() / 2];
      const uint32_t left = crc32c(buf.data() + off, a), right = crc32c(buf.data() + off + a, len - a);
      CHECK(crc32c_combine(left, right, len - a + 1) != whole);
      buf[off + rng() % len] ^= uint8_t(1u << (rng() % 8));
      CHECK(crc32c_combine(crc32c(buf.data() + off, a), crc32c(buf.data() + off + a, len - a), len - a) != whole);
    }
  }
}

// The GPU kernel's shift by a fixed length as table lookups (crc32c_math.h, make_crc32c_mul_table)
// equals the bitwise product, so a row folded with it is the combine of that row's bytes.
TEST_CASE("crc32c_math: the table multiply equals the bitwise one", "[crc32c]") {
  constexpr Crc32cPowers powers = make_crc32c_powers();
  const uint32_t y = crc32c_shift(512, powers.x2k);
  const Crc32cMulTable t = make_crc32c_mul_table(y);
  std::mt19937 rng(17);
  std::vector<uint8_t> a(512), b(512);
  for (int i = 0; i < 1000; ++i) {
    const uint32_t v = rng();
    REQUIRE(crc32c_mul_by(v, t.t) == crc32c_mulmod(y, v));
  }
  for (auto& x : a) x = uint8_t(rng());
  for (auto& x : b) x = uint8_t(rng());
  std::vector<uint8_t> ab(a);
  ab.insert(ab.end(), b.begin(), b.end());
  CHECK((crc32c_mul_by(crc32c(a.data(), 512), t.t) ^ crc32c(b.data(), 512)) == crc32c(ab.data(), ab.size()));
}
