// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum NVMe end-to-end protection
// and iSCSI use. Chainable: crc32c(b, crc32c(a)) == crc32c(a || b). Check value: "123456789" -> 0xE3069283.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gpunvme::model {

// Best available implementation (SSE4.2 crc32 instruction on x86-64 when the CPU has it).
uint32_t crc32c(const void* data, size_t len, uint32_t crc = 0);
// Portable slice-by-8 table implementation (also the fallback).
uint32_t crc32c_sw(const void* data, size_t len, uint32_t crc = 0);
// crc32c(A || B) from crc32c(A), crc32c(B) and B's length alone (crc32c_math.h): pieces of a chunk
// checked apart, in any order, against the chunk's one CRC. len_b < 2^61.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
// True when crc32c() uses the hardware instruction.
bool crc32c_has_hw();

}  // namespace gpunvme::model
