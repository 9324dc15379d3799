// Controller::reset: the controller goes through CC.EN 0 -> 1 again, the admin queue and every live
// I/O queue come back at the same bus addresses, and I/O works before and after on every queue.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_predicate.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <chrono>
#include <cstring>
#include <string>

#include "driver/commands.h"
#include "host/cpu_io.h"
#include "host/emulator/controller.h"
#include "host/error.h"
#include "host/io_patterns.h"
#include "host/open_device.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct ResetRig {
  emu::EmulatedController* emu = nullptr;
  std::unique_ptr<host::Controller> ctrl;
  std::vector<std::unique_ptr<host::QueuePair>> qps;
  std::unique_ptr<host::DmaBuffer> buf;

  explicit ResetRig(const std::string& device, int queues) {
    auto t = host::open_transport(device);
    emu = dynamic_cast<emu::EmulatedController*>(t.get());
    REQUIRE(emu != nullptr);
    host::ControllerOptions o;
    o.admin_timeout = std::chrono::milliseconds(500);
    ctrl = std::make_unique<host::Controller>(std::move(t), o);
    for (int q = 1; q <= queues; ++q) qps.push_back(ctrl->create_io_queue_pair(uint16_t(q), 16));
    buf = std::make_unique<host::DmaBuffer>(ctrl->transport(), 256 * 1024);
  }
  // Queue q writes its own 64 KiB region with its own pattern, then every queue reads it all back.
  void write_regions(uint64_t seed) {
    for (size_t q = 0; q < qps.size(); ++q) {
      host::CpuIo io(*ctrl, *qps[q], 1);
      host::fill_pattern(buf->as<uint8_t>(), 65536, seed + q);
      io.write(q * 128, 128, *buf, 0);
    }
  }
  void check_regions(uint64_t seed) {
    std::vector<uint8_t> want(65536);
    for (size_t q = 0; q < qps.size(); ++q) {
      host::CpuIo io(*ctrl, *qps[(q + 1) % qps.size()], 1);  // read through another queue
      std::memset(buf->host(), 0, 65536);
      io.read(q * 128, 128, *buf, 0);
      host::fill_pattern(want.data(), want.size(), seed + q);
      INFO("region " << q);
      CHECK(std::memcmp(buf->host(), want.data(), want.size()) == 0);
    }
  }
};

}  // namespace

TEST_CASE("reset recreates every live queue at the same addresses; I/O before and after", "[host][reset]") {
  ResetRig r("emu:ram,size=4M,queues=8", 3);
  r.write_regions(11);
  std::vector<uint64_t> sq, cq;
  for (auto& qp : r.qps) {
    sq.push_back(qp->sq_bus());
    cq.push_back(qp->cq_bus());
    CHECK(qp->generation() == 0);
  }
  const auto before = r.emu->stats().admin_commands;
  r.ctrl->reset("test");
  CHECK(r.ctrl->resets() == 1);
  CHECK_FALSE(r.ctrl->failed());
  // Set Features + 2 creates per queue: the queues were created again, not just left.
  CHECK(r.emu->stats().admin_commands - before == 1 + 2 * r.qps.size());
  for (size_t q = 0; q < r.qps.size(); ++q) {
    CHECK(r.qps[q]->generation() == 1);
    CHECK(r.qps[q]->sq_bus() == sq[q]);
    CHECK(r.qps[q]->cq_bus() == cq[q]);
  }
  r.check_regions(11);
  r.write_regions(12);  // writes after the reset land too
  r.ctrl->reset("again");
  CHECK(r.ctrl->resets() == 2);
  r.check_regions(12);
  // Admin commands still work after the reset (the admin queue is live too).
  auto extra = r.ctrl->create_io_queue_pair(5, 16);
  r.ctrl->delete_io_queue_pair(*extra);
}

TEST_CASE("reset forgets commands in flight and clears controller fatal status", "[host][reset]") {
  ResetRig r("emu:ram,size=4M,queues=4", 2);
  r.write_regions(21);
  // A dropped completion leaves a command in flight forever; CFS stops the controller.
  emu::Fault drop;
  drop.kind = emu::FaultKind::kDropCompletion;
  drop.qid = 1;
  r.emu->faults().add(drop);
  host::CpuIo io(*r.ctrl, *r.qps[0], 1);
  io.submit(host::IoRequest{nvme::nvm_op::kRead, 0, 8, r.buf.get(), 0});
  CHECK(r.qps[0]->in_flight() == 1);
  emu::Fault fatal;
  fatal.kind = emu::FaultKind::kFatalOnCommand;
  fatal.qid = 2;
  r.emu->faults().add(fatal);
  host::CpuIo io2(*r.ctrl, *r.qps[1], 1);
  const uint16_t cid = io2.submit(host::IoRequest{nvme::nvm_op::kRead, 0, 8, r.buf.get(), 0});
  CHECK_THROWS_AS(r.qps[1]->wait(cid, std::chrono::milliseconds(2000)), Error);
  CHECK_THROWS_AS(r.ctrl->check_fatal("test"), Error);

  const auto t0 = Clock::now();
  r.ctrl->reset("CFS");
  CHECK(ms_since(t0) < 1000);
  CHECK_NOTHROW(r.ctrl->check_fatal("after reset"));
  CHECK(r.qps[0]->in_flight() == 0);
  CHECK(r.qps[0]->free_slots() == 15);
  r.check_regions(21);
}

TEST_CASE("a queue pair destroyed without delete is not recreated by a reset", "[host][reset]") {
  ResetRig r("emu:ram,size=4M,queues=4", 1);
  {
    auto gone = r.ctrl->create_io_queue_pair(2, 16);
  }
  r.ctrl->reset("test");
  // QID 2 no longer exists on the controller, so it can be created afresh.
  auto again = r.ctrl->create_io_queue_pair(2, 16);
  host::CpuIo io(*r.ctrl, *again, 1);
  io.read(0, 8, *r.buf, 0);
  r.ctrl->delete_io_queue_pair(*again);
}

TEST_CASE("a controller that never becomes ready again fails the reset clearly, once", "[host][reset]") {
  ResetRig r("emu:ram,size=1M,to=1", 1);
  emu::Fault f;
  f.kind = emu::FaultKind::kNeverReady;
  r.emu->faults().add(f);
  auto t0 = Clock::now();
  try {
    r.ctrl->reset("test");
    FAIL("reset succeeded");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kTimeout);
    CHECK_THAT(std::string(e.what()), ContainsSubstring("controller reset (test) failed") && ContainsSubstring("CSTS.RDY"));
  }
  CHECK(ms_since(t0) >= 500);   // CAP.TO = 1 x 500 ms
  CHECK(ms_since(t0) < 2500);
  CHECK(r.ctrl->failed());
  // Everything after that is refused at once, naming the failed reset; no timeouts one by one.
  t0 = Clock::now();
  CHECK_THROWS_WITH(r.ctrl->reset("again"), ContainsSubstring("refused") && ContainsSubstring("CSTS.RDY"));
  CHECK_THROWS_WITH(r.ctrl->create_io_queue_pair(2, 16), ContainsSubstring("out of service"));
  CHECK(ms_since(t0) < 100);
}

TEST_CASE("fatal at the re-enable fails the reset as controller fatal", "[host][reset]") {
  ResetRig r("emu:ram,size=1M", 1);
  emu::Fault f;
  f.kind = emu::FaultKind::kFatalAtEnable;
  r.emu->faults().add(f);
  CHECK_THROWS_MATCHES(r.ctrl->reset("test"), Error, Catch::Matchers::Predicate<Error>([](const Error& e) {
                         return e.kind() == ErrorKind::kControllerFatal &&
                                std::string(e.what()).find("Controller Fatal Status") != std::string::npos;
                       }));
}
