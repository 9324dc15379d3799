// CRC-32C against published check values (RFC 3720 B.4, the "123456789" check) and sw == hw.
#include <catch2/catch_test_macros.hpp>

#include <random>
#include <vector>

#include "runtime/model/crc32c.h"

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
  std::vector<uint8_t> buf(4096 + 16);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t off = 0; off < 9; ++off) {
    for (size_t len : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 1000u, 4096u}) {
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
