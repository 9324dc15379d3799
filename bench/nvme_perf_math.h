// nvme_perf's workload and latency arithmetic, shared by the CPU path, the GPU kernel
// (bench/nvme_perf_gpu.cu) and the unit tests (tests/bench): __host__ __device__, no allocation.
//
//   IoPattern     which LBA the i-th command of queue q addresses, and whether it reads or writes.
//                 Counter-based (a SplitMix64 hash of seed, queue and i), so any lane of a warp can
//                 compute command i without a shared generator state; sequential patterns walk the
//                 span from a per-queue start. Every LBA is first_lba + k * blocks with k < slots.
//   LatencyHist   log-bucketed latency histogram in ns: exact below 32 ns, then 16 sub-buckets per
//                 power of two (bucket width <= 1/16 of its lower bound), 976 buckets up to 2^64 ns.
//                 percentile_ns() returns the middle of the nearest-rank bucket: relative error <= 1/32.
//   stamp()       the qword written at the start of every block by --fill / --verify (LBA-specific).
#pragma once
#include <cstdint>

#include "driver/compiler.h"

namespace gpunvme::perf {

GPUNVME_HD inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// floor(h * n / 2^64): an unbiased-enough map of a 64-bit hash onto [0, n) (n > 0), no division.
GPUNVME_HD inline uint64_t bounded(uint64_t h, uint64_t n) {
#if GPUNVME_ON_DEVICE
  return __umul64hi(h, n);
#else
  return uint64_t((static_cast<unsigned __int128>(h) * n) >> 64);
#endif
}

GPUNVME_HD inline uint32_t floor_log2(uint64_t v) {  // v > 0
#if GPUNVME_ON_DEVICE
  return 63u - uint32_t(__clzll(static_cast<long long>(v)));
#else
  return 63u - uint32_t(__builtin_clzll(v));
#endif
}

struct IoPattern {
  uint64_t first_lba = 0;   // start of the span
  uint64_t slots = 1;       // span / command size: commands address first_lba + k * blocks, k < slots
  uint32_t blocks = 1;      // logical blocks per command
  uint32_t queues = 1;      // queues sharing the span (sequential: queue q starts at q * slots / queues)
  uint32_t read_pct = 100;  // 100: reads only; 0: writes only; else reads with that probability
  uint32_t random = 0;      // 1: uniform random slots; 0: sequential
  uint64_t seed = 1;

  GPUNVME_HD uint64_t slot(uint32_t queue, uint64_t i) const {
    if (random) return bounded(mix64(seed ^ mix64((uint64_t(queue) << 40) ^ (i * 2))), slots);
    const uint64_t start = slots / queues * queue;  // slots * queue / queues without overflow concerns
    return (start + i % slots) % slots;
  }
  GPUNVME_HD uint64_t lba(uint32_t queue, uint64_t i) const { return first_lba + slot(queue, i) * blocks; }
  GPUNVME_HD bool is_read(uint32_t queue, uint64_t i) const {
    if (read_pct >= 100) return true;
    if (read_pct == 0) return false;
    return bounded(mix64(~seed ^ mix64((uint64_t(queue) << 40) ^ (i * 2 + 1))), 100) < read_pct;
  }
};

// The first qword of every block after --fill (and of every block --verify writes).
GPUNVME_HD inline uint64_t stamp(uint64_t lba) { return mix64(lba ^ 0x6770756E766D6550ull); }

namespace hist {
inline constexpr uint32_t kSubBits = 4;
inline constexpr uint32_t kSub = 1u << kSubBits;            // 16 sub-buckets per power of two
inline constexpr uint32_t kExact = 2 * kSub;                // values below 32 have a bucket each
inline constexpr uint32_t kBuckets = (64 - kSubBits + 1) * kSub;  // 976: the last holds 2^63 .. 2^64-1

GPUNVME_HD inline uint32_t bucket(uint64_t ns) {
  if (ns < kSub) return uint32_t(ns);
  const uint32_t e = floor_log2(ns);  // >= kSubBits
  const uint32_t sub = uint32_t(ns >> (e - kSubBits)) & (kSub - 1);
  return (e - kSubBits + 1) * kSub + sub;
}
// Lowest value of bucket b, and its width (b covers [low, low + width)).
GPUNVME_HD inline uint64_t low(uint32_t b) {
  if (b < kSub) return b;
  const uint32_t e = b / kSub + kSubBits - 1;
  return (uint64_t(kSub + b % kSub)) << (e - kSubBits);
}
GPUNVME_HD inline uint64_t width(uint32_t b) {
  if (b < kSub) return 1;
  return uint64_t(1) << (b / kSub - 1);
}
// The value a percentile in bucket b is reported as: the middle of the bucket (exact for width 1).
GPUNVME_HD inline double middle(uint32_t b) { return double(low(b)) + double(width(b) - 1) / 2.0; }

// Nearest-rank percentile (p in [0, 1]) of counts[kBuckets]: the middle of the bucket holding the
// ceil(p * total)-th smallest sample (at least the first). 0 when the histogram is empty.
inline double percentile_ns(const uint64_t* counts, double p) {
  uint64_t total = 0;
  for (uint32_t b = 0; b < kBuckets; ++b) total += counts[b];
  if (total == 0) return 0;
  // ceil(p * total), with p * total's rounding error kept from pushing an exact rank to the next one.
  const double r = p * double(total) * (1.0 - 1e-12);
  uint64_t rank = uint64_t(r);
  if (double(rank) < r) ++rank;
  if (rank < 1) rank = 1;
  if (rank > total) rank = total;
  uint64_t seen = 0;
  for (uint32_t b = 0; b < kBuckets; ++b) {
    seen += counts[b];
    if (seen >= rank) return middle(b);
  }
  return middle(kBuckets - 1);
}
}  // namespace hist

}  // namespace gpunvme::perf
