#include "runtime/model/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace gpunvme::model {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

// Slice-by-8: table[k][b] is the CRC of byte b followed by k zero bytes, so 8 input bytes are
// folded with 8 independent lookups per step instead of 8 dependent ones.
constexpr std::array<std::array<uint32_t, 256>, 8> make_tables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kPoly : 0u);
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (size_t k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}

constexpr auto kTables = make_tables();

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(const void* data, size_t len, uint32_t crc) {
  auto* p = static_cast<const uint8_t*>(data);
  uint64_t c = ~crc;
  for (; len >= 8; len -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
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
    lo ^= c;
    c = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
        kTables[4][lo >> 24] ^ kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^
        kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
  }
  for (; len > 0; --len, ++p) c = (c >> 8) ^ kTables[0][(c ^ *p) & 0xFF];
  return ~c;
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
