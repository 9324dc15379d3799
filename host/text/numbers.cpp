#include "host/text/numbers.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace gpunvme::text {
namespace {

[[noreturn]] void fail(std::string_view what, std::string_view text, const std::string& why) {
  throw ParseError(std::string(what) + ": '" + std::string(text) + "' " + why);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

size_t count_digits(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && is_digit(s[n])) ++n;
  return n;
}

// The leading digits of `text` as a number; refuses what a reader could take for another base or sign.
uint64_t leading_number(std::string_view what, std::string_view text, std::string_view digits, const char* form) {
  const std::string not_form = std::string("is not ") + form;
  if (text.size() > 1 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) fail(what, text, not_form + "; decimal only, no 0x");
  if (digits.empty()) {
    const bool sign = !text.empty() && (text[0] == '-' || text[0] == '+');
    fail(what, text, not_form + (sign ? "; no sign: negative values are refused" : ""));
  }
  if (digits.size() > 1 && digits[0] == '0') {
    const size_t first = std::min(digits.find_first_not_of('0'), digits.size() - 1);
    fail(what, text, "has a leading zero: numbers are decimal (not octal); write " +
                         std::string(digits.substr(first)) + std::string(text.substr(digits.size())));
  }
  uint64_t v = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v, 10);
  if (r.ec != std::errc()) fail(what, text, "is too large (at most 18446744073709551615)");
  return v;
}

}  // namespace

uint64_t parse_u64(std::string_view what, std::string_view text) {
  constexpr const char* kForm = "a number (decimal digits, e.g. 32)";
  const std::string_view digits = text.substr(0, count_digits(text));
  const uint64_t v = leading_number(what, text, digits, kForm);
  if (digits.size() != text.size()) fail(what, text, std::string("is not ") + kForm);
  return v;
}

uint64_t parse_size(std::string_view what, std::string_view text) {
  constexpr const char* kForm = "a size (decimal, optional K/M/G/T = 1024^1..4, e.g. 4096, 128K, 1G)";
  const std::string_view digits = text.substr(0, count_digits(text));
  const uint64_t n = leading_number(what, text, digits, kForm);
  std::string_view suffix = text.substr(digits.size());
  unsigned shift = 0;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      case 't': case 'T': shift = 40; break;
      case 'b': case 'B': shift = 0; break;
      default: fail(what, text, std::string("has an unknown unit (") + kForm + ")");
    }
    const bool bytes_only = shift == 0;
    suffix.remove_prefix(1);
    if (!bytes_only && (suffix == "B" || suffix == "b" || suffix == "iB" || suffix == "ib")) suffix = {};
    if (!suffix.empty()) fail(what, text, std::string("has an unknown unit (") + kForm + ")");
  }
  if (shift != 0 && n > (std::numeric_limits<uint64_t>::max() >> shift)) fail(what, text, "is too large");
  return n << shift;
}

double parse_decimal(std::string_view what, std::string_view text) {
  constexpr const char* kForm = "is not a decimal number (digits with an optional fraction, e.g. 4 or 0.5)";
  const size_t int_digits = count_digits(text);
  size_t end = int_digits;
  size_t frac_digits = 0;
  if (end < text.size() && text[end] == '.') {
    frac_digits = count_digits(text.substr(end + 1));
    end += 1 + frac_digits;
  }
  if (end != text.size() || int_digits + frac_digits == 0) {
    const bool sign = !text.empty() && (text[0] == '-' || text[0] == '+');
    fail(what, text, std::string(kForm) + (sign ? "; no sign: negative values are refused" : ""));
  }
  double v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v, std::chars_format::fixed);
  if (r.ec != std::errc() || !std::isfinite(v)) fail(what, text, "is too large");
  return v;
}

uint64_t parse_code(std::string_view what, std::string_view text) {
  if (text.size() < 2 || text[0] != '0' || (text[1] != 'x' && text[1] != 'X')) return parse_u64(what, text);
  const std::string_view hex = text.substr(2);
  uint64_t v = 0;
  const auto r = std::from_chars(hex.data(), hex.data() + hex.size(), v, 16);
  if (hex.empty() || hex.size() > 16 || r.ec != std::errc() || r.ptr != hex.data() + hex.size())
    fail(what, text, "is not a code (a decimal number, or 0x and 1..16 hex digits, e.g. 0x81)");
  return v;
}

std::string size_text(uint64_t b) {
  static constexpr struct {
    unsigned shift;
    char unit;
  } kUnits[] = {{40, 'T'}, {30, 'G'}, {20, 'M'}, {10, 'K'}};
  for (const auto& u : kUnits)
    if (b >= (1ull << u.shift) && b % (1ull << u.shift) == 0) return std::to_string(b >> u.shift) + u.unit;
  return std::to_string(b);
}

}  // namespace gpunvme::text
