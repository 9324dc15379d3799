// Kernels the GPU suite needs, behind plain host functions (the Catch2 files stay ordinary C++).
#pragma once
#include <cstdint>
#include <vector>

#include "device/device_queue.h"
#include "driver/compiler.h"
#include "host/io_patterns.h"

namespace gpunvme::test {

// The namespace's bytes hold host/io_patterns.h's position pattern: the 8 bytes at namespace byte
// offset 8*k are pattern_qword(seed, k).
using host::pattern_byte;
using host::pattern_qword;

inline void fill_ns_pattern(uint8_t* p, uint64_t bytes, uint64_t ns_offset, uint64_t seed) {
  host::fill_position_pattern(p, bytes, ns_offset, seed);
}

// `bytes` at dst + dst_offset must equal the namespace's bytes from ns_offset (all multiples of 8).
struct VerifySpan {
  uint64_t dst_offset;
  uint64_t ns_offset;
  uint64_t bytes;
};

// Compares every byte on the GPU; returns the number of 8-byte words that differ.
uint64_t gpu_count_mismatches(const uint8_t* gpu_dst, const std::vector<VerifySpan>& spans, uint64_t seed);

// The C API driven by one GPU thread: `count` reads of `blocks` blocks at lbas[i] into
// dst_bus + i * stride (PRPs from the caller: one or two pages), keeping up to `depth` in flight.
struct CApiResult {
  uint64_t submitted = 0;
  uint64_t succeeded = 0;
  uint64_t failed = 0;
  uint64_t timed_out = 0;
  uint64_t protocol_errors = 0;
  uint16_t first_status = 0;
  uint64_t elapsed_ns = 0;
};
CApiResult gpu_c_api_reads(device::DeviceQueue* q, const std::vector<uint64_t>& lbas, uint32_t blocks,
                           uint32_t lba_bytes, uint64_t dst_bus, uint64_t stride, uint32_t depth, uint64_t timeout_ns);

// Copies extents to device memory (freed by the returned holder's destructor).
struct DeviceBlob {
  void* p = nullptr;
  DeviceBlob(const void* host, uint64_t bytes);
  ~DeviceBlob();
  DeviceBlob(const DeviceBlob&) = delete;
  DeviceBlob& operator=(const DeviceBlob&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

}  // namespace gpunvme::test
