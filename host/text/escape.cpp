#include "host/text/escape.h"

#include <cstdint>
#include <cstdio>

namespace gpunvme::text {
namespace {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when the byte there does not
// start one (stray continuation bytes, overlong forms, surrogates, code points above U+10FFFF).
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return uint8_t(s[i + k]); };
  const uint8_t c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t lo = 0;
  if (c >= 0xC2 && c <= 0xDF) n = 2, lo = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = 0x10000;
  else return 0;
  if (i + n > s.size()) return 0;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if (cp < lo || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// U+0080..U+009F: C1 controls (0xC2 0x80..0x9F); some terminals act on them like ESC [.
bool is_c1(std::string_view piece) { return piece.size() == 2 && uint8_t(piece[0]) == 0xC2 && uint8_t(piece[1]) < 0xA0; }

std::string hex2(const char* fmt, unsigned v) {
  char b[12];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

// Calls f(piece, valid) for each UTF-8 sequence of `s` (valid), and each byte outside one (not valid).
template <class F>
void for_each_sequence(std::string_view s, F f) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_length(s, i);
    f(s.substr(i, n ? n : 1), n != 0);
    i += n ? n : 1;
  }
}

}  // namespace

std::string printable(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for_each_sequence(s, [&](std::string_view piece, bool valid) {
    const uint8_t c = uint8_t(piece[0]);
    if (!valid) {
      o += hex2("\\x%02x", c);
    } else if (is_c1(piece)) {
      o += hex2("\\u{%02x}", uint8_t(piece[1]));
    } else if (piece.size() == 1 && (c < 0x20 || c == 0x7F)) {
      switch (c) {
        case '\n': o += "\\n"; break;
        case '\t': o += "\\t"; break;
        case '\r': o += "\\r"; break;
        case 0x1B: o += "\\e"; break;
        default: o += hex2("\\x%02x", c);
      }
    } else {
      o += piece;
    }
  });
  return o;
}

std::string json_escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for_each_sequence(s, [&](std::string_view piece, bool valid) {
    const uint8_t c = uint8_t(piece[0]);
    if (!valid) {  // not UTF-8: surrogateescape's spelling of the byte (U+DC80..U+DCFF)
      o += hex2("\\udc%02x", c);
    } else if (piece.size() == 1 && (c < 0x20 || c == 0x7F || c == '"' || c == '\\')) {
      switch (c) {
        case '"': o += "\\\""; break;
        case '\\': o += "\\\\"; break;
        case '\n': o += "\\n"; break;
        case '\t': o += "\\t"; break;
        case '\r': o += "\\r"; break;
        default: o += hex2("\\u%04x", c);
      }
    } else {
      o += piece;
    }
  });
  return o;
}

std::string json_string(std::string_view s) { return "\"" + json_escape(s) + "\""; }

}  // namespace gpunvme::text
