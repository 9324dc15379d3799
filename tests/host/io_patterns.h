// Deterministic byte patterns and checksums for read-back tests.
#pragma once
#include <cstdint>
#include <cstring>

namespace gpunvme::test {

inline void fill_pattern(uint8_t* p, uint64_t bytes, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x1234567;
  for (uint64_t i = 0; i < bytes; i += 8) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    const uint64_t v = x * 0x2545F4914F6CDD1Dull;
    std::memcpy(p + i, &v, bytes - i < 8 ? bytes - i : 8);
  }
}

inline uint64_t checksum(const uint8_t* p, uint64_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace gpunvme::test
