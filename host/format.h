// Small text helpers for the host layer's messages.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace gpunvme::host {

// 0x-prefixed lower-case hex, e.g. hex(0x1f) == "0x1f": register values, addresses, IOVAs in messages.
inline std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace gpunvme::host
