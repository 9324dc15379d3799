// Deterministic byte patterns and a checksum for write / read-back checks (the demo, the host and
// VFIO test suites).
#pragma once
#include <cstdint>
#include <cstring>

namespace gpunvme::host {

// xorshift64*: a cheap pattern that differs per 8-byte word and per seed, so a misplaced or stale
// block is caught. Any length (a last partial word is cut short).
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

// 64-bit FNV-1a of n bytes.
inline uint64_t fnv1a(const uint8_t* p, uint64_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace gpunvme::host
