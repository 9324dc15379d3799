// Deterministic byte patterns and a checksum for write / read-back checks: the demo, the host, VFIO
// and GPU test suites, the runtime fixtures, the examples' generated models and bench/layer_stream
// all draw their patterns from here.
#pragma once
#include <cstdint>
#include <cstring>

#include "driver/compiler.h"

namespace gpunvme::host {

// splitmix64's output function: a bijection on 64-bit words in which every input bit flips about
// half the output bits, so nearby positions and seeds give unrelated words.
GPUNVME_HD inline uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One splitmix64 step from state x (the golden-ratio increment, then mix64).
GPUNVME_HD inline uint64_t splitmix64(uint64_t x) { return mix64(x + 0x9E3779B97F4A7C15ull); }

// Position-addressable pattern: the 8 bytes at byte position 8*k (of a file, a namespace) hold
// pattern_qword(seed, k), little-endian. Computable anywhere (host or GPU), in any order.
GPUNVME_HD inline uint64_t pattern_qword(uint64_t seed, uint64_t k) { return splitmix64(k ^ (seed << 40)); }
GPUNVME_HD inline uint8_t pattern_byte(uint64_t seed, uint64_t position) {
  return uint8_t(pattern_qword(seed, position >> 3) >> ((position & 7) * 8));
}

// p[0, bytes) := the position pattern's bytes [first, first + bytes): any alignment, any length.
inline void fill_position_pattern(uint8_t* p, uint64_t bytes, uint64_t first, uint64_t seed) {
  for (uint64_t i = 0; i < bytes; ++i) p[i] = pattern_byte(seed, first + i);
}

// xorshift64*: a cheap stream pattern that differs per 8-byte word and per seed, so a misplaced or
// stale block is caught. Any length (a last partial word is cut short).
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
