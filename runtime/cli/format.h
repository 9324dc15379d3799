// Human-readable numbers for tool output.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace gpunvme::cli {

inline std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

inline std::string trim_id(const char* field, size_t n) {
  std::string s(field, n);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

}  // namespace gpunvme::cli
