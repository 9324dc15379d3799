// bench/nvme_perf_math.h on the CPU: the same __host__ __device__ code the GPU kernel runs.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "bench/nvme_perf_math.h"

using namespace gpunvme::perf;

TEST_CASE("random LBAs stay inside the span, aligned to the command size, and cover it", "[bench]") {
  for (uint32_t blocks : {1u, 8u, 32u, 512u}) {
    for (uint64_t slots : {uint64_t(1), uint64_t(3), uint64_t(1000), uint64_t(1) << 20, (uint64_t(1) << 40) + 7}) {
      IoPattern p;
      p.first_lba = 4096;
      p.blocks = blocks;
      p.slots = slots;
      p.queues = 4;
      p.random = 1;
      p.seed = 42;
      std::vector<uint64_t> hits(std::min<uint64_t>(slots, 64), 0);
      const uint64_t n = 20000;
      for (uint32_t q = 0; q < 4; ++q) {
        for (uint64_t i = 0; i < n; ++i) {
          const uint64_t lba = p.lba(q, i);
          REQUIRE(lba >= p.first_lba);
          REQUIRE((lba - p.first_lba) % blocks == 0);
          REQUIRE((lba - p.first_lba) / blocks < slots);
          REQUIRE(lba + blocks <= p.first_lba + slots * blocks);  // the whole command is inside
          if (slots <= 64) ++hits[(lba - p.first_lba) / blocks];
        }
      }
      // Small spans: every slot is hit, roughly uniformly (within 15% of the mean for 80000 draws).
      if (slots <= 64) {
        const double mean = 4.0 * n / double(slots);
        for (uint64_t h : hits) REQUIRE(std::fabs(double(h) - mean) < 0.15 * mean);
      }
    }
  }
}

TEST_CASE("random LBAs differ between queues and seeds, and are reproducible", "[bench]") {
  IoPattern p;
  p.slots = 1ull << 30;
  p.random = 1;
  p.queues = 2;
  IoPattern p2 = p;
  p2.seed = 2;
  uint64_t same_q = 0, same_seed = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    REQUIRE(p.lba(0, i) == p.lba(0, i));
    same_q += p.lba(0, i) == p.lba(1, i);
    same_seed += p.lba(0, i) == p2.lba(0, i);
  }
  REQUIRE(same_q < 5);
  REQUIRE(same_seed < 5);
  // Not a short cycle: 100000 draws over 2^30 slots collide ~4.7 times by the birthday bound.
  std::set<uint64_t> seen;
  for (uint64_t i = 0; i < 100000; ++i) seen.insert(p.slot(0, i));
  REQUIRE(seen.size() > 99970);
}

TEST_CASE("sequential LBAs walk the span from a per-queue start and wrap", "[bench]") {
  IoPattern p;
  p.first_lba = 0;
  p.blocks = 8;
  p.slots = 100;
  p.queues = 4;
  p.random = 0;
  for (uint32_t q = 0; q < 4; ++q) {
    REQUIRE(p.lba(q, 0) == uint64_t(q) * 25 * 8);
    for (uint64_t i = 0; i < 250; ++i) {
      REQUIRE(p.slot(q, i) == (q * 25 + i) % 100);
      REQUIRE(p.lba(q, i) % 8 == 0);
      REQUIRE(p.lba(q, i) < 800);
    }
  }
}

TEST_CASE("the read/write mix follows read_pct", "[bench]") {
  IoPattern p;
  p.slots = 1000;
  for (uint32_t pct : {0u, 1u, 30u, 70u, 99u, 100u}) {
    p.read_pct = pct;
    uint64_t reads = 0;
    const uint64_t n = 200000;
    for (uint64_t i = 0; i < n; ++i) reads += p.is_read(uint32_t(i % 3), i);
    const double got = 100.0 * double(reads) / double(n);
    if (pct == 0 || pct == 100) REQUIRE(got == double(pct));
    else REQUIRE(std::fabs(got - pct) < 0.5);
  }
}

TEST_CASE("histogram buckets: exact below 32 ns, contiguous, 16 per power of two", "[bench]") {
  using namespace hist;
  for (uint64_t v = 0; v < 32; ++v) {
    REQUIRE(bucket(v) == v);
    REQUIRE(low(uint32_t(v)) == v);
    REQUIRE(width(uint32_t(v)) == 1);
  }
  // Every bucket starts where the previous one ends; bucket(low) == b and bucket(low + width - 1) == b.
  for (uint32_t b = 1; b < kBuckets; ++b) {
    const uint64_t lo = low(b), w = width(b);
    REQUIRE(lo == low(b - 1) + width(b - 1));
    REQUIRE(bucket(lo) == b);
    REQUIRE(bucket(lo + (w - 1)) == b);
    if (b >= kExact) REQUIRE(double(w) <= double(lo) / 16.0);
  }
  REQUIRE(bucket(~0ull) == kBuckets - 1);
  REQUIRE(low(kBuckets - 1) + (width(kBuckets - 1) - 1) == ~0ull);
  // Powers of two land on a sub-bucket 0.
  for (uint32_t e = 5; e < 64; ++e) REQUIRE(bucket(1ull << e) % kSub == 0);
}

namespace {
double exact_percentile(std::vector<uint64_t> v, double p) {  // nearest rank
  std::sort(v.begin(), v.end());
  uint64_t rank = uint64_t(std::ceil(p * double(v.size()) * (1.0 - 1e-12)));
  rank = std::clamp<uint64_t>(rank, 1, v.size());
  return double(v[rank - 1]);
}
}  // namespace

TEST_CASE("histogram percentiles are within 1/32 of the exact nearest-rank value", "[bench]") {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> lat(std::log(20000.0), 0.8);  // ~20 us median, long tail
  std::vector<uint64_t> counts(hist::kBuckets, 0);
  std::vector<uint64_t> samples;
  for (int i = 0; i < 300000; ++i) {
    const uint64_t v = uint64_t(lat(rng));
    samples.push_back(v);
    ++counts[hist::bucket(v)];
  }
  for (double p : {0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0}) {
    const double exact = exact_percentile(samples, p);
    const double got = hist::percentile_ns(counts.data(), p);
    INFO("p=" << p << " exact=" << exact << " hist=" << got);
    REQUIRE(std::fabs(got - exact) <= exact / 32.0 + 0.5);
  }
}

TEST_CASE("histogram percentiles: small and edge cases", "[bench]") {
  std::vector<uint64_t> c(hist::kBuckets, 0);
  REQUIRE(hist::percentile_ns(c.data(), 0.5) == 0);  // empty
  ++c[hist::bucket(10)];
  REQUIRE(hist::percentile_ns(c.data(), 0.0) == 10);
  REQUIRE(hist::percentile_ns(c.data(), 0.999) == 10);
  // 1000 samples: 999 at 7 ns, one at 1 ms. p99.9 is the 999th value (7), p100 the 1 ms one.
  c[hist::bucket(10)] = 0;
  c[hist::bucket(7)] = 999;
  ++c[hist::bucket(1000000)];
  REQUIRE(hist::percentile_ns(c.data(), 0.5) == 7);
  REQUIRE(hist::percentile_ns(c.data(), 0.999) == 7);
  const double top = hist::percentile_ns(c.data(), 1.0);
  REQUIRE(std::fabs(top - 1e6) <= 1e6 / 32);
  // 100 samples 1..100 ns (exact buckets up to 31, then width 2 and 4): p50 = 50 +- 1, p99 = 99 +- 2.
  std::fill(c.begin(), c.end(), 0);
  for (uint64_t v = 1; v <= 100; ++v) ++c[hist::bucket(v)];
  REQUIRE(std::fabs(hist::percentile_ns(c.data(), 0.5) - 50) <= 1);
  REQUIRE(std::fabs(hist::percentile_ns(c.data(), 0.99) - 99) <= 2);
  REQUIRE(hist::percentile_ns(c.data(), 0.2) == 20);
}

TEST_CASE("stamps differ from block to block", "[bench]") {
  std::set<uint64_t> s;
  for (uint64_t lba = 0; lba < 100000; ++lba) s.insert(stamp(lba));
  REQUIRE(s.size() == 100000);
}
