#include "host/text/human_bytes.h"

#include <cstdio>

namespace gpunvme::text {

std::string human_bytes(double b) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, kUnits[u]);
  return buf;
}

}  // namespace gpunvme::text
