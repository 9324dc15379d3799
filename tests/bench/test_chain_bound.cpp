// bench/llm_tokens' second floor for MoE cells with no prefetch (bench/chain_bound.h): the dependent
// chain's arithmetic, on the numbers of a Qwen3-30B-A3B 8G:0 pcie5 off cell in round figures, and with a
// drive per GPU.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <vector>

#include "bench/chain_bound.h"

using namespace gpunvme;
using Catch::Approx;

TEST_CASE("the chain: the time outside the reads plus the expert bytes at the drive's rate", "[bench]") {
  // 10 tokens in 0.54 s; the fetches (48 a token) stalled 0.39 s, 0.38 of it reading; 3.6 GB of experts
  // (360 MB a token) from one drive of 10 GB/s: 36 ms a token, which is also the bytes floor.
  bench::ChainTimes t;
  t.wall_seconds = 0.54, t.stall_seconds = 0.39, t.read_seconds = 0.38, t.after_reads_seconds = 0.01;
  t.expert_bytes = 3'600'000'000, t.fetches = 480;
  const bench::ChainBound b = bench::chain_bound(t, 10, 10e9, 0.036);
  CHECK(b.outside_seconds == Approx(0.015));  // (0.54 - 0.39) / 10: the drive idle for the experts
  CHECK(b.read_floor_seconds == Approx(0.036));
  CHECK(b.seconds == Approx(0.051));          // 15 + 36 ms: 19.6 tok/s where the bytes allow 27.8
  CHECK(b.tokens_per_second() == Approx(1 / 0.051));
  CHECK(b.after_reads_seconds == Approx(0.001));
  CHECK(b.stall_seconds == Approx(0.039));
  CHECK(b.read_seconds == Approx(0.038));
  CHECK(b.fetches == Approx(48));
  CHECK(b.overhead_per_fetch_seconds == Approx(0.003 / 48));  // (39 - 36 ms) over 48 fetches a token
  // The cell's rate against both floors: 10 / 0.54 = 18.5 tok/s is 67 % of the bytes floor, 94 % of the chain.
  const double tps = 10 / 0.54;
  CHECK(tps * 0.036 == Approx(0.6667).epsilon(1e-3));
  CHECK(tps * b.seconds == Approx(0.9444).epsilon(1e-3));
}

TEST_CASE("the chain is never below the bytes floor, and counts every drive at once", "[bench]") {
  bench::ChainTimes t;
  t.wall_seconds = 1.0, t.stall_seconds = 0.9, t.read_seconds = 0.9, t.expert_bytes = 1000, t.fetches = 2;
  // The host link (or a busier drive) floors the token at 2 s a token: the chain (0.1 + 0.5 s) cannot go below it.
  CHECK(bench::chain_bound(t, 1, 2000, 2.0).seconds == 2.0);
  // Two drives of 1000 B/s: the reads' floor is 1000 B over 2000 B/s.
  CHECK(bench::chain_bound(t, 1, 2 * 1000.0, 0).read_floor_seconds == 0.5);
  // Drive none (unthrottled): no read floor, only the time outside the reads.
  const bench::ChainBound none = bench::chain_bound(t, 1, 0, 0);
  CHECK(none.read_floor_seconds == 0);
  CHECK(none.seconds == Approx(0.1));
  CHECK(none.overhead_per_fetch_seconds == Approx(0.45));
  // A stall a little above the wall (the GPU's clock against the host's): nothing outside, not less.
  t.stall_seconds = t.read_seconds = 1.001;
  CHECK(bench::chain_bound(t, 1, 2000, 0).outside_seconds == 0);
  CHECK(bench::chain_bound(t, 1, 2000, 0).seconds == 0.5);
}

TEST_CASE("a drive per GPU: each GPU's expert bytes at its own drive's rate, in turn", "[bench]") {
  // Two GPUs, each with a drive of 1000 B/s (--drive-per-gpu), plus the shared controller, which reads no
  // experts then. GPU 0's layers fetched 300 B, GPU 1's 700 B: the GPUs' ranges run in turn, so 0.3 +
  // 0.7 s, not 1000 B over the three drives' 3000 B/s (0.33 s) as counting every served drive at once gave.
  bench::ChainTimes t;
  t.wall_seconds = 2.0, t.stall_seconds = 1.5, t.read_seconds = 1.2, t.expert_bytes = 1000, t.fetches = 4;
  const std::vector<bench::ChainReads> per_gpu{{300, 1000.0}, {700, 1000.0}};
  const bench::ChainBound b = bench::chain_bound(t, 1, per_gpu, 0);
  CHECK(b.read_floor_seconds == Approx(1.0));
  CHECK(b.seconds == Approx(1.5));  // 0.5 s outside + 1.0 s of reads
  CHECK(b.overhead_per_fetch_seconds == Approx(0.5 / 4));
  // Drives of other rates: each GPU's bytes at its own (300 B at 3000 B/s, 700 B at 700 B/s).
  CHECK(bench::chain_bound(t, 1, std::vector<bench::ChainReads>{{300, 3000.0}, {700, 700.0}}, 0).read_floor_seconds == Approx(1.1));
  // An unthrottled drive adds no floor; the one-set form is one part of every byte.
  CHECK(bench::chain_bound(t, 1, std::vector<bench::ChainReads>{{300, 0.0}, {700, 1000.0}}, 0).read_floor_seconds == Approx(0.7));
  CHECK(bench::chain_bound(t, 1, 1000.0, 0).read_floor_seconds == Approx(bench::chain_bound(t, 1, std::vector<bench::ChainReads>{{1000, 1000.0}}, 0).read_floor_seconds));
  // The parts must be the fetches' bytes: a GPU's share lost or counted twice is refused.
  CHECK_THROWS_WITH(bench::chain_bound(t, 1, std::vector<bench::ChainReads>{{300, 1000.0}}, 0),
                    Catch::Matchers::ContainsSubstring("sum to 300 expert bytes, the fetches read 1000"));
  CHECK_THROWS_WITH(bench::chain_bound(t, 1, std::vector<bench::ChainReads>{{300, -1.0}, {700, 1000.0}}, 0),
                    Catch::Matchers::ContainsSubstring("negative"));
}

TEST_CASE("the chain refuses what cannot be", "[bench]") {
  bench::ChainTimes t;
  t.wall_seconds = 1, t.stall_seconds = 0.5, t.read_seconds = 0.6;
  CHECK_THROWS_WITH(bench::chain_bound(t, 1, 1, 0), Catch::Matchers::ContainsSubstring("exceeds the stall"));
  t.read_seconds = 0.4;
  CHECK_THROWS_WITH(bench::chain_bound(t, 0, 1, 0), Catch::Matchers::ContainsSubstring("no tokens"));
  CHECK_THROWS_WITH(bench::chain_bound(t, 1, -1, 0), Catch::Matchers::ContainsSubstring("negative"));
}

TEST_CASE("added_seconds: a per-layer clock's growth between two readings", "[bench]") {
  const std::vector<double> before = {0.25, 0.5}, after = {0.75, 1.0};
  CHECK(bench::added_seconds(before, after) == 1.0);
  CHECK(bench::added_seconds(std::vector<double>{}, after) == 1.75);  // no fetch before
  CHECK_THROWS_WITH(bench::added_seconds(before, std::vector<double>{1.0}), Catch::Matchers::ContainsSubstring("2 layers before, 1 after"));
  CHECK_THROWS_WITH(bench::added_seconds(after, before), Catch::Matchers::ContainsSubstring("went back"));
}
