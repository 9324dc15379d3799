#include "runtime/model/crc32c.h"

#include <cstring>

#include "runtime/model/crc32c_math.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace gpunvme::model {
namespace {

// The tables and the combine arithmetic are crc32c_math.h's, shared with the GPU kernel.
constexpr Crc32cTables kTables = make_crc32c_tables();
constexpr Crc32cPowers kPowers = make_crc32c_powers();

#if defined(__x86_64__)
// One crc32 instruction has a latency of 3 cycles and a throughput of 1 per cycle, so a single
// dependent chain runs at a third of the unit's rate (about 8 GB/s at 3 GHz). Three independent
// chains over consecutive thirds of a block, joined by the combine operation, keep it busy: the
// engine checks every byte it loads at start (examples/llm/engine/load_check.h) on one host thread.
constexpr size_t kStreamBytes = 4096;
constexpr uint32_t kStreamShift = crc32c_shift(kStreamBytes, kPowers.x2k);

__attribute__((target("sse4.2"))) uint32_t crc32c_hw(const void* data, size_t len, uint32_t crc) {
  auto* p = static_cast<const uint8_t*>(data);
  auto load = [](const uint8_t* q) {
    uint64_t w;
    std::memcpy(&w, q, 8);
    return w;
  };
  for (; len >= 3 * kStreamBytes; len -= 3 * kStreamBytes, p += 3 * kStreamBytes) {
    uint64_t a = ~crc, b = ~0u, c = ~0u;
    for (size_t i = 0; i < kStreamBytes; i += 8) {
      a = _mm_crc32_u64(a, load(p + i));
      b = _mm_crc32_u64(b, load(p + kStreamBytes + i));
      c = _mm_crc32_u64(c, load(p + 2 * kStreamBytes + i));
    }
    const uint32_t ab = crc32c_combine_op(~uint32_t(a), ~uint32_t(b), kStreamShift);
    crc = crc32c_combine_op(ab, ~uint32_t(c), kStreamShift);
  }
  uint64_t c = ~crc;
  for (; len >= 8; len -= 8, p += 8) c = _mm_crc32_u64(c, load(p));
  auto c32 = static_cast<uint32_t>(c);
  for (; len > 0; --len, ++p) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
}
#endif

}  // namespace

uint32_t crc32c_sw(const void* data, size_t len, uint32_t crc) {
  auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (; len >= 8; len -= 8, p += 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);  // little-endian host: byte 0 is the low byte
    std::memcpy(&hi, p + 4, 4);
    c = crc32c_fold8(c, lo, hi, kTables.t);
  }
  for (; len > 0; --len, ++p) c = crc32c_fold1(c, *p, kTables.t);
  return ~c;
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return crc32c_combine_with(crc_a, crc_b, len_b, kPowers.x2k);
}

bool crc32c_has_hw() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
#else
  return false;
#endif
}

uint32_t crc32c(const void* data, size_t len, uint32_t crc) {
#if defined(__x86_64__)
  if (crc32c_has_hw()) return crc32c_hw(data, len, crc);
#endif
  return crc32c_sw(data, len, crc);
}

}  // namespace gpunvme::model
