// Outside text made safe: printable() for terminals, json_string() for JSON (host/text/escape.h).
#include <catch2/catch_test_macros.hpp>

#include <string>

#include "host/text/escape.h"

using namespace gpunvme::text;

TEST_CASE("printable: no control character or invalid byte reaches the terminal", "[text][escape]") {
  CHECK(printable("blk.0.attn_q.weight") == "blk.0.attn_q.weight");
  CHECK(printable("caf\xc3\xa9 \xe6\xa8\xa1\xe5\x9e\x8b \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe6\xa8\xa1\xe5\x9e\x8b \xf0\x9f\x98\x80");
  // A name that would end the line and forge a verdict of its own.
  CHECK(printable("x\nOK: 99/99 chunks match") == "x\\nOK: 99/99 chunks match");
  CHECK(printable("a\rb\tc") == "a\\rb\\tc");
  CHECK(printable("\x1b[2J\x1b]0;title\x07") == "\\e[2J\\e]0;title\\x07");
  CHECK(printable(std::string("nul\0x", 5)) == "nul\\x00x");
  CHECK(printable("del\x7f") == "del\\x7f");
  CHECK(printable("c1 \xc2\x9b" "31m") == "c1 \\u{9b}31m");  // U+009B: CSI for some terminals
  CHECK(printable("bad \xff\xfe") == "bad \\xff\\xfe");
  CHECK(printable("cut \xe6\xa8") == "cut \\xe6\\xa8");           // a truncated sequence
  CHECK(printable("overlong \xc0\xaf") == "overlong \\xc0\\xaf");
  CHECK(printable("surrogate \xed\xa0\x80") == "surrogate \\xed\\xa0\\x80");
  for (int c = 0; c < 256; ++c) {
    const std::string out = printable(std::string(1, char(c)));
    for (unsigned char o : out) CHECK((o >= 0x20 && o != 0x7f && o < 0x80));
  }
}

TEST_CASE("json_string: any bytes give one valid JSON string literal", "[text][escape]") {
  CHECK(json_string("plain") == "\"plain\"");
  CHECK(json_string("q\"b\\s/") == "\"q\\\"b\\\\s/\"");
  CHECK(json_string("l1\nl2\r\t") == "\"l1\\nl2\\r\\t\"");
  CHECK(json_string("\x1b[0m\x01\x7f") == "\"\\u001b[0m\\u0001\\u007f\"");
  CHECK(json_string("caf\xc3\xa9") == "\"caf\xc3\xa9\"");
  // Not UTF-8: surrogateescape's spelling, so Python gets the bytes back exactly.
  CHECK(json_string("\xff\xfe") == "\"\\udcff\\udcfe\"");
  CHECK(json_string("\xe6\xa8") == "\"\\udce6\\udca8\"");
  CHECK(json_string("\xed\xa0\x80") == "\"\\udced\\udca0\\udc80\"");
  CHECK(json_escape("a\"b") == "a\\\"b");
  // No raw control byte and no byte >= 0x80 outside a valid UTF-8 sequence, for every single byte.
  for (int c = 0; c < 256; ++c) {
    const std::string out = json_string(std::string(1, char(c)));
    for (unsigned char o : out) CHECK((o >= 0x20 && o < 0x7f));
  }
}
