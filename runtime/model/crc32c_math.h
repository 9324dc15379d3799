// CRC-32C arithmetic, written once for the host and the GPU: the slice-by-8 byte tables and their
// folding step (crc32c_sw on the host, the CRC kernel on the GPU, runtime/stream/gpu_crc.cu), and the
// combine operation, which gives crc(A || B) from crc(A), crc(B) and |B| alone:
//   crc(A || B) = crc(A) * x^(8 |B|) mod P  xor  crc(B)
// (P the Castagnoli polynomial; the pre- and post-inversion of the standard CRC cancel, as in zlib's
// crc32_combine). It lets pieces of a chunk CRC'd apart, in any order, by the host or by many GPU
// warps at once, be checked against the chunk's one CRC in the deploy record.
//
// Polynomials are in the reflected bit order of the CRC itself: bit 31 is x^0, bit 0 is x^31.
#pragma once
#include <cstddef>
#include <cstdint>

#include "driver/compiler.h"

namespace gpunvme::model {

inline constexpr uint32_t kCrc32cPoly = 0x82F63B78u;  // reflected Castagnoli polynomial
inline constexpr uint32_t kCrc32cOne = 0x80000000u;   // the polynomial 1 (x^0)
inline constexpr uint32_t kCrc32cX = 0x40000000u;     // the polynomial x

// Slice-by-8 tables: t[k][b] is the CRC register after byte b followed by k zero bytes.
struct Crc32cTables {
  uint32_t t[8][256];
};
constexpr Crc32cTables make_crc32c_tables() {
  Crc32cTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kCrc32cPoly : 0u);
    t.t[0][b] = c;
  }
  for (uint32_t k = 1; k < 8; ++k)
    for (uint32_t b = 0; b < 256; ++b) t.t[k][b] = (t.t[k - 1][b] >> 8) ^ t.t[0][t.t[k - 1][b] & 0xFFu];
  return t;
}

// Folds 8 bytes (lo = bytes 0-3, hi = bytes 4-7, little-endian) into the CRC register `c` (the
// inverted CRC): 8 independent lookups instead of 8 dependent ones.
GPUNVME_HD inline uint32_t crc32c_fold8(uint32_t c, uint32_t lo, uint32_t hi, const uint32_t (*t)[256]) {
  lo ^= c;
  return t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][hi & 0xFF] ^
         t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
}
GPUNVME_HD inline uint32_t crc32c_fold1(uint32_t c, uint8_t byte, const uint32_t (*t)[256]) {
  return (c >> 8) ^ t[0][(c ^ byte) & 0xFF];
}

// a * b mod P (zlib's multmodp).
GPUNVME_HD constexpr uint32_t crc32c_mulmod(uint32_t a, uint32_t b) {
  uint32_t m = kCrc32cOne, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1u) ? (b >> 1) ^ kCrc32cPoly : b >> 1;
  }
  return p;
}

// x^(2^k) mod P for k = 0..63: the powers the shift of any byte count is a product of.
struct Crc32cPowers {
  uint32_t x2k[64];
};
constexpr Crc32cPowers make_crc32c_powers() {
  Crc32cPowers p{};
  p.x2k[0] = kCrc32cX;
  for (int k = 1; k < 64; ++k) p.x2k[k] = crc32c_mulmod(p.x2k[k - 1], p.x2k[k - 1]);
  return p;
}

// Multiplication by a fixed polynomial y as four table lookups (the product is linear in the other
// factor, so it is the XOR of each byte's product): t[j][b] = y * (b at byte j) mod P. For a shift
// applied over and over (the GPU kernel's x^(8 * 512), once per 512-byte row).
struct Crc32cMulTable {
  uint32_t t[4][256];
};
constexpr Crc32cMulTable make_crc32c_mul_table(uint32_t y) {
  Crc32cMulTable m{};
  for (uint32_t j = 0; j < 4; ++j)
    for (uint32_t b = 0; b < 256; ++b) m.t[j][b] = crc32c_mulmod(y, b << (8 * j));
  return m;
}
GPUNVME_HD inline uint32_t crc32c_mul_by(uint32_t a, const uint32_t (*t)[256]) {
  return t[0][a & 0xFF] ^ t[1][(a >> 8) & 0xFF] ^ t[2][(a >> 16) & 0xFF] ^ t[3][a >> 24];
}

// x^(8 n) mod P: what crc(A) is multiplied by when n bytes follow A. n < 2^61 (x2k has 64 powers).
GPUNVME_HD constexpr uint32_t crc32c_shift(uint64_t n, const uint32_t* x2k) {
  uint32_t p = kCrc32cOne;
  for (int k = 3; n != 0; n >>= 1, ++k)
    if (n & 1u) p = crc32c_mulmod(x2k[k], p);
  return p;
}

// crc(A || B) from crc(A), crc(B) and |B| (standard CRCs: crc32c() of each part from 0).
GPUNVME_HD constexpr uint32_t crc32c_combine_with(uint32_t crc_a, uint32_t crc_b, uint64_t len_b, const uint32_t* x2k) {
  return crc32c_mulmod(crc32c_shift(len_b, x2k), crc_a) ^ crc_b;
}
// The same with the shift of |B| known (a constant where B's length is fixed).
GPUNVME_HD constexpr uint32_t crc32c_combine_op(uint32_t crc_a, uint32_t crc_b, uint32_t shift_b) {
  return crc32c_mulmod(shift_b, crc_a) ^ crc_b;
}

}  // namespace gpunvme::model
