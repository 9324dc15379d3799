// bench/llm_tokens' bound from what the modeled drives served (bench/served_bound.h): the arithmetic,
// and the counts it reads: an emulated controller's served bytes through DriveControllers and the
// mmap loader's Pacer, with real reads. llm_tokens itself needs a GPU; these parts do not.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/baselines/pacing.h"
#include "bench/llm_modeled_drive.h"
#include "bench/served_bound.h"
#include "host/cpu_io.h"
#include "host/dma_memory.h"
#include "host/io_patterns.h"
#include "tests/test_files.h"

using namespace gpunvme;

TEST_CASE("the served bound: the busiest drive's bytes per token at its rate, or the link's time", "[bench]") {
  const std::vector<uint64_t> one = {600};
  CHECK(bench::served_bound_seconds(one, 3, 100, 0) == 2.0);    // 200 B a token at 100 B/s
  CHECK(bench::served_bound_seconds(one, 3, 100, 2.5) == 2.5);  // the host link is the slower
  CHECK(bench::served_bound_seconds(one, 3, 0, 0.5) == 0.5);    // drive none: only the link bounds
  CHECK(bench::served_bound_seconds(std::vector<uint64_t>{}, 1, 100, 0) == 0);
  // Two drives (a striped set, or a drive per GPU): the busiest, not the sum at twice the rate.
  const std::vector<uint64_t> uneven = {100, 300};
  CHECK(bench::served_bound_seconds(uneven, 1, 100, 0) == 3.0);
  CHECK(bench::served_bytes_per_token(uneven, 2) == 200.0);
  CHECK_THROWS_WITH(bench::served_bound_seconds(one, 0, 100, 0), Catch::Matchers::ContainsSubstring("no tokens"));
  CHECK_THROWS_WITH(bench::served_bytes_per_token(one, 0), Catch::Matchers::ContainsSubstring("no tokens"));
}

TEST_CASE("the served bound stays a floor where a cache hits more than the plan expected", "[bench]") {
  // The Qwen3-235B 22G:32G pcie4 case in small: the plan expects 1000 B a token from the drive (its
  // cache holding a uniform router's share); the cache hit more and the drive served 800 a token, so
  // at 100 B/s the cell ran 1/8 tok/s: 125 % of the plan's 1/10, 100 % of the served bound.
  const double plan_tps = 100.0 / 1000, measured_tps = 1.0 / 8;
  const std::vector<uint64_t> served = {4 * 800};  // 4 timed tokens
  const double bound_tps = 1 / bench::served_bound_seconds(served, 4, 100, 0);
  CHECK(measured_tps > plan_tps);
  CHECK(measured_tps <= bound_tps);
}

TEST_CASE("served_between: each drive's difference, same drives in the same order", "[bench]") {
  const std::vector<uint64_t> before = {10, 20}, after = {15, 70};
  CHECK(bench::served_between(before, after) == std::vector<uint64_t>{5, 50});
  CHECK_THROWS_WITH(bench::served_between(before, std::vector<uint64_t>{15}), Catch::Matchers::ContainsSubstring("2 drives before, 1 after"));
  CHECK_THROWS_WITH(bench::served_between(after, before), Catch::Matchers::ContainsSubstring("drive 0's count went back"));
}

namespace {

// `tokens` "tokens" of reads through controller `ctrl` (its queue 1), token t reading `bytes[t]` from
// LBA 0 into a buffer whose bytes must then equal the image's; returns the time the reads took (the
// comparisons not counted).
double read_tokens(host::Controller& ctrl, const std::vector<uint64_t>& bytes, const std::vector<uint8_t>& image) {
  auto qp = ctrl.create_io_queue_pair(1, 64);
  host::CpuIo io(ctrl, *qp, 1, {.queue_depth = 16});
  uint64_t most = 0;
  for (uint64_t b : bytes) most = std::max(most, b);
  host::DmaBuffer buf(ctrl.transport(), most);
  double s = 0;
  for (uint64_t b : bytes) {
    const auto t0 = std::chrono::steady_clock::now();
    io.read(0, b / io.lba_bytes(), buf);
    s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE(host::fnv1a(buf.as<uint8_t>(), b) == host::fnv1a(image.data(), b));
  }
  ctrl.delete_io_queue_pair(*qp);
  return s;
}

}  // namespace

TEST_CASE("DriveControllers counts the bytes each modeled drive served, and a paced run stays under its bound", "[bench][io]") {
  test_files::TempDir dir("served-bound");
  std::vector<uint8_t> image(16u << 20);
  host::fill_pattern(image.data(), image.size(), 7);
  test_files::write_file(dir / "a.img", image);
  test_files::write_file(dir / "b.img", image);
  // A striped set's two members, each its own controller modeling an sn530 slowed to 300 MB/s (bw=, as
  // --emu-opts gives it): a rate this machine's emulator reaches, so the rate check below can fail.
  const bench::DriveControllers drives({"emu:" + (dir / "a.img"), "emu:" + (dir / "b.img")}, "sn530", 2, "bw=300M");
  REQUIRE(drives.read_bandwidth() == 300e6);
  const std::vector<uint64_t> before = drives.served_bytes();
  REQUIRE(before.size() == 2);
  // Member 0 serves 4 "tokens" of 8, 16, 4 and 16 MiB (a cache would make them uneven); member 1 one of 1 MiB.
  const std::vector<uint64_t> per_token = {8u << 20, 16u << 20, 4u << 20, 16u << 20};
  const double seconds = read_tokens(*drives.controllers()[0], per_token, image);
  read_tokens(*drives.controllers()[1], {1u << 20}, image);
  const std::vector<uint64_t> served = bench::served_between(before, drives.served_bytes());
  CHECK(served == std::vector<uint64_t>{44u << 20, 1u << 20});
  // The measured rate cannot beat the bound the served bytes give (the drive model never completes N
  // bytes in less than N / its rate); 1 % for the clocks' edges.
  const double bound_tps = 1 / bench::served_bound_seconds(served, 4, drives.read_bandwidth(), 0);
  const double tps = 4 / seconds;
  INFO("measured " << tps << " tok/s, bound " << bound_tps);
  CHECK(tps <= bound_tps * 1.01);
  CHECK(tps >= bound_tps * 0.2);  // paced by the model, not by something far slower (then the check above proves little)
  CHECK(bench::served_bytes_per_token(served, 4) == double(45u << 20) / 4);
}

TEST_CASE("the mmap loaders' Pacer counts what each drive was asked to move", "[bench]") {
  bench::ls::Pacer p("pcie4", 2);
  REQUIRE(p.drives() == 2);
  p.admit(0, 4096);
  p.admit(0, 1 << 20);
  p.admit(1, 512);
  CHECK(p.admitted_bytes(0) == 4096 + (1 << 20));
  CHECK(p.admitted_bytes(1) == 512);
  CHECK_THROWS_WITH(p.admit(2, 1), Catch::Matchers::ContainsSubstring("drive 2 of 2"));
  CHECK_THROWS_WITH(p.admitted_bytes(5), Catch::Matchers::ContainsSubstring("drive 5 of 2"));
}

TEST_CASE("a Pacer made from a controller's drive model paces at its overrides, as llm_tokens' mmap cells do", "[bench]") {
  const bench::DriveControllers drives({"emu:ram,size=1M"}, "pcie4", 1, "bw=300M");
  REQUIRE(drives.drive_model() != nullptr);
  bench::ls::Pacer p(drives.drive_model()->params(), 1);
  const int64_t t0 = bench::ls::now_ns();
  const int64_t due = p.admit(0, 30'000'000);  // 0.1 s at 300 MB/s; 4 ms at the profile's 7.3 GB/s
  CHECK(due - t0 >= 99'000'000);
  CHECK(p.admitted_bytes(0) == 30'000'000);
  CHECK(bench::DriveControllers({"emu:ram,size=1M"}, "none", 1).drive_model() == nullptr);
}
