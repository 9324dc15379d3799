// CPU-initiated I/O against the emulated controller: real bytes written, read back, compared.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <algorithm>
#include <cstring>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "host/cpu_io.h"
#include "host/error.h"
#include "host/open_device.h"
#include "host/io_patterns.h"

using namespace gpunvme;

TEST_CASE("patterns read back byte-exact at many sizes, offsets and both LBA sizes", "[host][io]") {
  const uint32_t lba = GENERATE(512u, 4096u);
  // mdts=2: 16 KiB per command, so anything larger is split and lists stay short but chained ones appear
  // at the larger sizes with mdts=8 below.
  const std::string mdts = GENERATE(std::string("2"), std::string("8"));
  auto ctrl = host::open_controller("emu:ram,size=64M,lba=" + std::to_string(lba) + ",mdts=" + mdts);
  auto qp = ctrl->create_io_queue_pair(1, 64);
  host::CpuIo io(*ctrl, *qp, 1, {.queue_depth = 16, .max_command_bytes = 4u << 20});
  const uint64_t max_bytes = 6ull << 20;
  host::DmaBuffer out(ctrl->transport(), max_bytes + 8192), in(ctrl->transport(), max_bytes + 8192);
  const std::vector<uint64_t> sizes = {512, 4096, 8192, 12288, 65536, 131072, 1u << 20, (2u << 20) + 4096, 6u << 20};
  const std::vector<uint64_t> buf_offsets = {0, 4, 512, 4092};
  uint64_t seed = 1;
  for (uint64_t size : sizes) {
    if (size % lba) continue;
    for (uint64_t off : buf_offsets) {
      const uint64_t slba = (seed * 977) % (ctrl->namespaces()[0].blocks - size / lba);
      INFO("lba " << lba << " mdts " << mdts << " size " << size << " buffer offset " << off << " slba " << slba);
      host::fill_pattern(out.as<uint8_t>() + off, size, seed);
      std::memset(in.host(), 0xEE, size + off + 16);
      io.write(slba, size / lba, out, off);
      io.read(slba, size / lba, in, off);
      REQUIRE(host::fnv1a(in.as<uint8_t>() + off, size) == host::fnv1a(out.as<uint8_t>() + off, size));
      // Bytes around the destination are untouched.
      if (off > 0) CHECK(in.as<uint8_t>()[off - 1] == 0xEE);
      CHECK(in.as<uint8_t>()[off + size] == 0xEE);
      ++seed;
    }
  }
  ctrl->delete_io_queue_pair(*qp);
}

TEST_CASE("a file-backed namespace holds the bytes at LBA * block size (dd compatible)", "[host][io]") {
  char path[] = "/tmp/gpunvme-test-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  unlink(path);
  {
    auto ctrl = host::open_controller(std::string("emu:") + path + ",size=8M,lba=512");
    auto qp = ctrl->create_io_queue_pair(1, 32);
    host::CpuIo io(*ctrl, *qp, 1);
    host::DmaBuffer buf(ctrl->transport(), 1 << 20);
    host::fill_pattern(buf.as<uint8_t>(), 1 << 20, 77);
    io.write(100, (1 << 20) / 512, buf, 0);
    io.flush();
  }
  std::vector<uint8_t> file(1 << 20), want(1 << 20);
  host::fill_pattern(want.data(), want.size(), 77);
  const int rfd = open(path, O_RDONLY);
  REQUIRE(rfd >= 0);
  REQUIRE(pread(rfd, file.data(), file.size(), 100 * 512) == ssize_t(file.size()));
  close(rfd);
  CHECK(file == want);
  // And the reverse: bytes put into the image by someone else (dd) are read through the driver.
  {
    auto ctrl = host::open_controller(std::string("emu:") + path);
    auto qp = ctrl->create_io_queue_pair(1, 32);
    host::CpuIo io(*ctrl, *qp, 1);
    host::DmaBuffer buf(ctrl->transport(), 1 << 20);
    io.read(100, (1 << 20) / 512, buf, 0);
    CHECK(std::memcmp(buf.host(), want.data(), want.size()) == 0);
  }
  unlink(path);
}

TEST_CASE("concurrent I/O on several queues keeps every stream intact", "[host][io]") {
  auto ctrl = host::open_controller("emu:ram,size=128M,lba=4096,queues=8,threads=2");
  const int nq = 4;
  const uint64_t per = 8u << 20;  // bytes per queue, disjoint ranges
  std::vector<std::unique_ptr<host::QueuePair>> qps;
  for (int q = 0; q < nq; ++q) qps.push_back(ctrl->create_io_queue_pair(uint16_t(q + 1), 128));
  std::vector<std::string> errors(nq);
  std::vector<std::thread> threads;
  for (int q = 0; q < nq; ++q) {
    threads.emplace_back([&, q] {
      try {
        host::CpuIo io(*ctrl, *qps[q], 1, {.queue_depth = 32});
        host::DmaBuffer out(ctrl->transport(), per), in(ctrl->transport(), per);
        for (int round = 0; round < 3; ++round) {
          host::fill_pattern(out.as<uint8_t>(), per, uint64_t(q * 100 + round));
          const uint64_t slba = uint64_t(q) * per / 4096;
          io.write(slba, per / 4096, out, 0);
          io.read(slba, per / 4096, in, 0);
          if (std::memcmp(out.host(), in.host(), per) != 0) errors[q] = "mismatch in round " + std::to_string(round);
        }
      } catch (const std::exception& e) {
        errors[q] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int q = 0; q < nq; ++q) {
    INFO("queue " << q + 1);
    CHECK(errors[q].empty());
  }
  for (auto& qp : qps) ctrl->delete_io_queue_pair(*qp);
}

TEST_CASE("out-of-range and oversized requests fail with clear errors", "[host][io]") {
  auto ctrl = host::open_controller("emu:ram,size=1M,lba=512");
  auto qp = ctrl->create_io_queue_pair(1, 16);
  host::CpuIo io(*ctrl, *qp, 1);
  host::DmaBuffer buf(ctrl->transport(), 64 * 1024);
  // Caught on the host before submission.
  CHECK_THROWS_WITH(io.read(2047, 2, buf, 0), Catch::Matchers::ContainsSubstring("runs past the end"));
  // Caught by the controller: submit a raw read past the end and decode its status.
  const uint16_t tag = io.submit(host::IoRequest{nvme::nvm_op::kRead, 2048, 1, &buf, 0});
  host::Completion c{};
  const auto t0 = std::chrono::steady_clock::now();
  while (io.reap(&c, 1) == 0) REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(c.cid == tag);
  CHECK(io.recovery().failed == 1);  // DNR set: final at once
  CHECK(io.recovery().retries == 0);
  CHECK(c.status.type() == nvme::sct::kGeneric);
  CHECK(c.status.code() == nvme::sc::kLbaOutOfRange);
  CHECK(nvme::describe(c.status).find("LBA Out of Range") != std::string::npos);
  // Wrong namespace.
  auto e = nvme::make_read(9, 0, 1, buf.bus(), 0);
  const host::Completion c2 = qp->wait(qp->submit(e), std::chrono::seconds(5));
  CHECK(c2.status.code() == nvme::sc::kInvalidNamespaceOrFormat);
}

TEST_CASE("a PRP pointing outside DMA-mapped memory fails and touches nothing", "[host][io]") {
  auto ctrl = host::open_controller("emu:ram,size=1M,lba=512");
  auto qp = ctrl->create_io_queue_pair(1, 16);
  host::DmaBuffer buf(ctrl->transport(), 4096);
  std::vector<uint8_t> not_mapped(4096, 0x5A);
  // Passing a virtual address as a bus address is the classic bug; the emulator's IOMMU table catches it.
  const auto bogus = reinterpret_cast<uint64_t>(not_mapped.data());
  const host::Completion c = qp->wait(qp->submit(nvme::make_read(1, 0, 8, bogus, 0)), std::chrono::seconds(5));
  CHECK(c.status.code() == nvme::sc::kDataTransferError);
  CHECK(std::all_of(not_mapped.begin(), not_mapped.end(), [](uint8_t b) { return b == 0x5A; }));
  // PRP1 not dword aligned.
  const host::Completion c2 = qp->wait(qp->submit(nvme::make_read(1, 0, 1, buf.bus() + 2, 0)), std::chrono::seconds(5));
  CHECK(c2.status.code() == nvme::sc::kPrpOffsetInvalid);
}
