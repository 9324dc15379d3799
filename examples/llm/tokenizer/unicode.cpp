#include "examples/llm/tokenizer/unicode.h"

#include <algorithm>
#include <iterator>

namespace gpunvme::llm {
namespace {

bool continuation(std::string_view s, size_t i) { return i < s.size() && (uint8_t(s[i]) & 0xC0) == 0x80; }

// The sequence at s[i]: its length (0 when invalid) and value.
size_t decode_one(std::string_view s, size_t i, char32_t& cp) {
  const uint8_t b = uint8_t(s[i]);
  size_t n;
  if (b < 0x80) n = 1, cp = b;
  else if ((b & 0xE0) == 0xC0) n = 2, cp = b & 0x1F;
  else if ((b & 0xF0) == 0xE0) n = 3, cp = b & 0x0F;
  else if ((b & 0xF8) == 0xF0) n = 4, cp = b & 0x07;
  else return 0;  // a continuation byte or 0xF8..0xFF
  for (size_t k = 1; k < n; ++k) {
    if (!continuation(s, i + k)) return 0;
    cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3F);
  }
  return cp > 0x10FFFF ? 0 : n;
}

}  // namespace

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    const size_t n = decode_one(s, i, cp);
    out.push_back(n ? cp : kReplacementChar);
    i += n ? n : 1;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

unicode_data::CodepointClass codepoint_class(char32_t cp) {
  using unicode_data::kRanges;
  // The first range that ends at or after cp; cp is in it when it also starts at or before cp.
  const auto* r = std::lower_bound(std::begin(kRanges), std::end(kRanges), uint32_t(cp),
                                   [](const unicode_data::CodepointRange& x, uint32_t c) { return x.last < c; });
  return r != std::end(kRanges) && r->first <= cp ? r->cls : unicode_data::kOther;
}

}  // namespace gpunvme::llm
