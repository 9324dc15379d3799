// What host memory the kernel can give: the CPU executor's check that a model fits, and the share of it
// several GPUs' streaming slots may pin (stream_slots.h).
#pragma once
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

namespace gpunvme::llm {

// /proc/meminfo's MemAvailable: what the kernel can give without swapping; nullopt where unknown.
inline std::optional<uint64_t> available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemAvailable:") return kib << 10;
    in.ignore(64, '\n');
  }
  return std::nullopt;
}

}  // namespace gpunvme::llm
