#include "runtime/deploy/shell_quote.h"

#include <algorithm>
#include <cstdio>

namespace gpunvme::deploy {
namespace {

bool plain(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("_./,:=+@%-").find(char(c)) != std::string_view::npos;
}
bool control(unsigned char c) { return c < 0x20 || c == 0x7f; }

}  // namespace

std::string shell_quote(std::string_view s) {
  if (!s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return plain(static_cast<unsigned char>(c)); })) {
    return std::string(s);
  }
  if (std::none_of(s.begin(), s.end(), [](char c) { return control(static_cast<unsigned char>(c)); })) {
    std::string o = "'";
    for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return o + "'";
  }
  std::string o = "$'";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (control(u)) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", u);
      o += b;
    } else if (c == '\\' || c == '\'') {
      o += '\\';
      o += c;
    } else {
      o += c;
    }
  }
  return o + "'";
}

}  // namespace gpunvme::deploy
