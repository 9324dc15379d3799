// The one grammar for numbers and sizes (host/text/numbers.h): decimal only, K/M/G/T = 1024^n.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "host/text/numbers.h"

using namespace gpunvme::text;
using Catch::Matchers::ContainsSubstring;

namespace {
std::string error_of(auto parse, const char* what, const char* text) {
  try {
    parse(what, text);
  } catch (const ParseError& e) {
    return e.what();
  }
  return "(accepted)";
}
const auto u64 = [](const char* w, const char* t) { return parse_u64(w, t); };
const auto size = [](const char* w, const char* t) { return parse_size(w, t); };
const auto dec = [](const char* w, const char* t) { return parse_decimal(w, t); };
}  // namespace

TEST_CASE("numbers are decimal digits and nothing else", "[text][numbers]") {
  CHECK(parse_u64("--qd", "0") == 0);
  CHECK(parse_u64("--qd", "32") == 32);
  CHECK(parse_u64("--qd", "18446744073709551615") == ~0ull);
  // --start-lba 0100 deployed at LBA 64 (octal); -1 became 2^64-1; 0x10 was 16.
  CHECK_THAT(error_of(u64, "--start-lba", "0100"), ContainsSubstring("--start-lba: '0100' has a leading zero"));
  CHECK_THAT(error_of(u64, "--start-lba", "-1"), ContainsSubstring("--start-lba: '-1' is not a number"));
  CHECK_THAT(error_of(u64, "--start-lba", "-1"), ContainsSubstring("negative values are refused"));
  CHECK_THAT(error_of(u64, "--qd", "0x10"), ContainsSubstring("decimal only, no 0x"));
  for (const char* bad : {"", "+1", " 1", "1 ", "1k", "1.0", "18446744073709551616", "00"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_u64("--n", bad), ParseError);
  }
}

TEST_CASE("sizes take K/M/G/T as powers of 1024, with optional B or iB", "[text][numbers]") {
  // (the emulator's size= cases, from when it had a parser of its own, come first)
  CHECK(parse_size("size", "4096") == 4096);
  CHECK(parse_size("size", "512K") == 512ull << 10);
  CHECK(parse_size("size", "256M") == 256ull << 20);
  CHECK(parse_size("size", "1G") == 1ull << 30);
  CHECK(parse_size("size", "2T") == 2ull << 40);
  CHECK(parse_size("size", "1GiB") == 1ull << 30);
  CHECK(parse_size("size", "3g") == 3ull << 30);
  for (const char* bad : {"", "G", "1X", "1.5G", "-1", "99999999999T"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_size("size", bad), ParseError);
  }
  CHECK(parse_size("--bs", "0") == 0);
  CHECK(parse_size("--bs", "128k") == 128ull << 10);
  CHECK(parse_size("--bs", "128KB") == 128ull << 10);
  CHECK(parse_size("--bs", "128KiB") == 128ull << 10);
  CHECK(parse_size("--bs", "512B") == 512);
  CHECK(parse_size("--bs", "16777215T") == 16777215ull << 40);
  CHECK_THAT(error_of(size, "--bs", "-1"), ContainsSubstring("--bs: '-1' is not a size"));
  CHECK_THAT(error_of(size, "--bs", "0x10"), ContainsSubstring("no 0x"));
  CHECK_THAT(error_of(size, "--bs", "0100K"), ContainsSubstring("leading zero"));
  CHECK_THAT(error_of(size, "--bs", "4X"), ContainsSubstring("--bs: '4X' has an unknown unit"));
  CHECK_THAT(error_of(size, "--bs", "16777216T"), ContainsSubstring("too large"));
  for (const char* bad : {"K", "1KK", "1Bi", "1 K", "1e3"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_size("--bs", bad), ParseError);
  }
}

TEST_CASE("decimals: digits with an optional fraction, no sign, exponent or words", "[text][numbers]") {
  CHECK(parse_decimal("--time", "4") == 4.0);
  CHECK(parse_decimal("--time", "0.5") == 0.5);
  CHECK(parse_decimal("--time", ".25") == 0.25);
  CHECK(parse_decimal("--time", "3.") == 3.0);
  CHECK_THAT(error_of(dec, "--time", "-2"), ContainsSubstring("negative values are refused"));
  for (const char* bad : {"", ".", "1e3", "inf", "nan", "0x1p3", "1,5", "1.2.3"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_decimal("--time", bad), ParseError);
  }
}

TEST_CASE("size_text is the shortest spelling parse_size reads back", "[text][numbers]") {
  for (uint64_t v : {0ull, 1ull, 1000ull, 4096ull, 128ull << 10, 3ull << 30, 5ull << 40, (1ull << 20) + 512}) {
    INFO(v);
    CHECK(parse_size("x", size_text(v)) == v);
  }
  CHECK(size_text(4096) == "4K");
  CHECK(size_text(3ull << 30) == "3G");
  CHECK(size_text(1000) == "1000");
}

TEST_CASE("codes take decimal or 0x hex, nothing else", "[text][numbers]") {
  CHECK(parse_code("sc", "0x81") == 0x81);
  CHECK(parse_code("sc", "0X7f") == 0x7F);
  CHECK(parse_code("sc", "129") == 129);
  CHECK(parse_code("sc", "0") == 0);
  CHECK(parse_code("xor", "0xffffffffffffffff") == ~0ull);
  for (const char* bad : {"0x", "0x1g", "-1", "0x-1", "0100", "81h", "0x10000000000000000", ""}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_code("sc", bad), ParseError);
  }
}
