// Text helpers for tool output: sizes for people, identify strings, outside text made printable.
#pragma once
#include <cstddef>
#include <string>

#include "host/text/escape.h"
#include "host/text/human_bytes.h"

namespace gpunvme::cli {

using text::human_bytes;
using text::printable;

// An identify string field (space- or NUL-padded, not terminated) without its padding, made printable.
inline std::string trim_id(const char* field, size_t n) {
  std::string s(field, n);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return printable(s);
}

}  // namespace gpunvme::cli
