// Every injected controller fault becomes a clear, bounded error on the host side, and data that
// was not part of the failed command stays intact.
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
#include "host/open_device.h"
#include "host/io_patterns.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;
using Clock = std::chrono::steady_clock;

namespace {

struct Rig {
  emu::EmulatedController* emu = nullptr;
  std::unique_ptr<host::Controller> ctrl;
  std::unique_ptr<host::QueuePair> qp;
  std::unique_ptr<host::CpuIo> io;
  std::unique_ptr<host::DmaBuffer> buf;

  explicit Rig(const std::string& device, std::vector<emu::Fault> at_start = {},
               std::chrono::milliseconds io_timeout = std::chrono::milliseconds(300)) {
    auto t = host::open_transport(device);
    emu = dynamic_cast<emu::EmulatedController*>(t.get());
    REQUIRE(emu != nullptr);
    for (const auto& f : at_start) emu->faults().add(f);
    host::ControllerOptions o;
    o.admin_timeout = std::chrono::milliseconds(500);
    ctrl = std::make_unique<host::Controller>(std::move(t), o);
    qp = ctrl->create_io_queue_pair(1, 32);
    io = std::make_unique<host::CpuIo>(*ctrl, *qp, 1, host::CpuIoOptions{.queue_depth = 8, .timeout = io_timeout});
    buf = std::make_unique<host::DmaBuffer>(ctrl->transport(), 1 << 20);
  }
  // Writes a known pattern over the first MiB and returns its checksum.
  uint64_t seed_data() {
    host::fill_pattern(buf->as<uint8_t>(), 1 << 20, 9);
    io->write(0, (1 << 20) / 512, *buf, 0);
    return host::fnv1a(buf->as<uint8_t>(), 1 << 20);
  }
  uint64_t read_back() {
    std::memset(buf->host(), 0, 1 << 20);
    io->read(0, (1 << 20) / 512, *buf, 0);
    return host::fnv1a(buf->as<uint8_t>(), 1 << 20);
  }
};

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

}  // namespace

TEST_CASE("an error status on the n-th read is reported with its decoded status", "[host][faults]") {
  Rig r("emu:ram,size=4M,mdts=2");
  const uint64_t sum = r.seed_data();
  emu::Fault f;
  f.kind = emu::FaultKind::kErrorStatus;
  f.qid = 1;
  f.opcode = nvme::nvm_op::kRead;
  f.nth = 3;
  f.sct = nvme::sct::kMediaError;
  f.sc = nvme::sc::kUnrecoveredReadError;
  f.dnr = true;
  const int id = r.emu->faults().add(f);
  try {
    r.read_back();
    FAIL("read with an injected media error succeeded");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kCommandFailed);
    CHECK_THAT(std::string(e.what()), ContainsSubstring("Unrecovered Read Error") && ContainsSubstring("LBA"));
    CHECK(e.status().dnr());
  }
  CHECK(r.emu->faults().fired(id) == 1);
  // The queue is still usable and the data is intact.
  CHECK(r.read_back() == sum);
}

TEST_CASE("a dropped completion is aborted and retried, not a hang", "[host][faults]") {
  Rig r("emu:ram,size=4M");
  const uint64_t sum = r.seed_data();
  emu::Fault f;
  f.kind = emu::FaultKind::kDropCompletion;
  f.qid = 1;
  f.opcode = nvme::nvm_op::kRead;
  r.emu->faults().add(f);
  const auto t0 = Clock::now();
  CHECK(r.read_back() == sum);
  const double waited = ms_since(t0);
  CHECK(waited >= 250);   // the 300 ms timeout passed before the abort
  CHECK(waited < 3000);
  CHECK(r.io->recovery().timeouts == 1);
  CHECK(r.io->recovery().aborts == 1);
  CHECK(r.io->recovery().retries == 1);  // the aborted command came back as Abort Requested, DNR clear
  CHECK(r.io->recovery().resets == 0);
}

TEST_CASE("a delayed completion is waited for", "[host][faults]") {
  Rig r("emu:ram,size=4M", {}, std::chrono::milliseconds(2000));
  const uint64_t sum = r.seed_data();
  emu::Fault f;
  f.kind = emu::FaultKind::kDelayCompletion;
  f.qid = 1;
  f.delay = std::chrono::milliseconds(60);
  r.emu->faults().add(f);
  const auto t0 = Clock::now();
  CHECK(r.read_back() == sum);
  CHECK(ms_since(t0) >= 60);
}

TEST_CASE("a completion with a wrong command id is a protocol error, counted; the command is recovered", "[host][faults]") {
  Rig r("emu:ram,size=4M");
  const uint64_t sum = r.seed_data();
  emu::Fault f;
  f.kind = emu::FaultKind::kWrongCid;
  f.qid = 1;
  f.cid_xor = 0x4000;
  r.emu->faults().add(f);
  CHECK(r.read_back() == sum);
  CHECK(r.io->recovery().protocol_errors == 1);
  // The controller does not hold the real command (its completion went out under another id), so
  // the abort finds nothing and the controller is reset.
  CHECK(r.io->recovery().aborts == 1);
  CHECK(r.io->recovery().resets == 1);
  CHECK(r.qp->last_protocol_error().find("not in flight") != std::string::npos);
}

TEST_CASE("controller fatal status during I/O is detected quickly", "[host][faults]") {
  Rig r("emu:ram,size=4M", {}, std::chrono::milliseconds(5000));
  emu::Fault f;
  f.kind = emu::FaultKind::kFatalOnCommand;
  f.qid = 1;
  r.emu->faults().add(f);
  const auto t0 = Clock::now();
  try {
    // wait() polls CSTS about once a millisecond, so CFS ends the wait long before the 5 s timeout.
    const uint16_t cid = r.io->submit(host::IoRequest{nvme::nvm_op::kRead, 0, 8, r.buf.get(), 0});
    r.qp->wait(cid, std::chrono::milliseconds(5000));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kControllerFatal);
    CHECK_THAT(std::string(e.what()), ContainsSubstring("CSTS.CFS"));
  }
  CHECK(ms_since(t0) < 1000);
}

TEST_CASE("enable faults: fatal, slow and never ready", "[host][faults]") {
  SECTION("fatal at enable") {
    emu::Fault f;
    f.kind = emu::FaultKind::kFatalAtEnable;
    CHECK_THROWS_MATCHES(Rig("emu:ram,size=1M", {f}), Error, Catch::Matchers::Predicate<Error>([](const Error& e) {
                           return e.kind() == ErrorKind::kControllerFatal;
                         }));
  }
  SECTION("slow ready within CAP.TO succeeds") {
    emu::Fault f;
    f.kind = emu::FaultKind::kSlowReady;
    f.delay = std::chrono::milliseconds(200);
    const auto t0 = Clock::now();
    Rig r("emu:ram,size=1M,to=2", {f});
    CHECK(ms_since(t0) >= 200);
  }
  SECTION("never ready times out after CAP.TO, naming it") {
    emu::Fault f;
    f.kind = emu::FaultKind::kNeverReady;
    const auto t0 = Clock::now();
    try {
      Rig r("emu:ram,size=1M,to=1", {f});
      FAIL("came up");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kTimeout);
      CHECK_THAT(std::string(e.what()), ContainsSubstring("CAP.TO") && ContainsSubstring("CSTS.RDY"));
    }
    const double waited = ms_since(t0);
    CHECK(waited >= 500);
    CHECK(waited < 2500);
  }
}

TEST_CASE("a dropped admin completion times out the admin command", "[host][faults]") {
  Rig r("emu:ram,size=1M,queues=4");
  emu::Fault f;
  f.kind = emu::FaultKind::kDropCompletion;
  f.qid = 0;
  f.opcode = nvme::admin_op::kCreateIoCq;
  r.emu->faults().add(f);
  const auto t0 = Clock::now();
  CHECK_THROWS_MATCHES(r.ctrl->create_io_queue_pair(2, 16), Error, Catch::Matchers::Predicate<Error>([](const Error& e) {
                         return e.kind() == ErrorKind::kTimeout;
                       }));
  CHECK(ms_since(t0) < 2000);
}
