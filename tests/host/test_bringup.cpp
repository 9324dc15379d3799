#include <catch2/catch_test_macros.hpp>
#include <string>

#include "driver/memory_order.h"
#include "driver/registers.h"
#include "host/error.h"
#include "host/open_device.h"

using namespace gpunvme;

TEST_CASE("bring-up and identify on the emulated controller", "[host][bringup]") {
  auto ctrl = host::open_controller("emu:ram,size=64M,lba=4096,namespaces=2,queues=8,mdts=5");
  const auto& id = ctrl->identify();
  CHECK(std::string(id.mn, 8) == "gpunvme ");
  CHECK(id.mdts == 5);
  CHECK(ctrl->max_transfer_bytes() == 128 * 1024);
  CHECK(ctrl->io_queues_granted() == 8);
  REQUIRE(ctrl->namespaces().size() == 2);
  for (const auto& ns : ctrl->namespaces()) {
    CHECK(ns.lba_bytes == 4096);
    CHECK(ns.bytes() == 64ull << 20);
  }
  CHECK(ctrl->namespaces()[0].nsid == 1);
  CHECK(ctrl->namespaces()[1].nsid == 2);
  CHECK(ctrl->max_blocks_per_command(1) == 32);
  const nvme::Csts csts{nvme::mmio_read32(ctrl->transport().bar0() + nvme::reg::kCsts / 4)};
  CHECK(csts.rdy());
  ctrl->shutdown();
  const nvme::Csts after{nvme::mmio_read32(ctrl->transport().bar0() + nvme::reg::kCsts / 4)};
  CHECK(after.shst() == nvme::csts::kShstComplete);
}

TEST_CASE("every granted I/O queue pair can be created and deleted", "[host][queues]") {
  auto ctrl = host::open_controller("emu:ram,size=16M,queues=31,mqes=63");
  REQUIRE(ctrl->io_queues_granted() == 31);
  CHECK(ctrl->max_queue_entries() == 64);
  std::vector<std::unique_ptr<host::QueuePair>> qps;
  for (uint16_t q = 1; q <= 31; ++q) qps.push_back(ctrl->create_io_queue_pair(q, 64));
  // One past the grant and one past CAP.MQES are refused with an explanation.
  CHECK_THROWS_AS(ctrl->create_io_queue_pair(32, 16), Error);
  try {
    ctrl->create_io_queue_pair(1, 65);
    FAIL("oversized queue accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("CAP.MQES") != std::string::npos);
  }
  for (auto& qp : qps) ctrl->delete_io_queue_pair(*qp);
  // Deleted ids can be created again.
  auto again = ctrl->create_io_queue_pair(7, 32);
  ctrl->delete_io_queue_pair(*again);
}

TEST_CASE("a queue id created twice is refused by the controller", "[host][queues]") {
  auto ctrl = host::open_controller("emu:ram,size=16M,queues=4");
  auto a = ctrl->create_io_queue_pair(2, 16);
  try {
    auto b = ctrl->create_io_queue_pair(2, 16);
    FAIL("duplicate queue id accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kCommandFailed);
    CHECK(e.has_status());
  }
  ctrl->delete_io_queue_pair(*a);
}

TEST_CASE("bad device strings name the problem", "[host][device]") {
  try {
    host::open_transport("nvme0");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("emu:") != std::string::npos);
  }
  CHECK_THROWS_AS(host::open_transport("emu:ram,size=1G,bogus=3"), Error);
  CHECK_THROWS_AS(host::open_transport("emu:/nonexistent/dir/x.img"), Error);
}
