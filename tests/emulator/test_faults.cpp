// Fault injection: every kind, observed at register and queue level.
#include "tests/emulator/harness.h"

using namespace emutest;
using gpunvme::emu::Fault;
using gpunvme::emu::FaultKind;
namespace sc = gpunvme::nvme::sc;
namespace sct = gpunvme::nvme::sct;

TEST_CASE("fault: delayed completion", "[emulator][faults]") {
  Harness h("emu:null,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 8);
  Fault f;
  f.kind = FaultKind::kDelayCompletion;
  f.qid = 1;
  f.delay = std::chrono::milliseconds(80);
  const int id = h.ctrl().faults().add(f);
  const auto t0 = std::chrono::steady_clock::now();
  const uint16_t cid = h.submit(q, nvme::make_read(1, 0, 1, 0, 0));
  CHECK_FALSE(h.poll(q, 20ms).has_value());
  auto c = h.poll(q, 2000ms);
  REQUIRE(c.has_value());
  CHECK(c->cid == cid);
  CHECK(status_of(*c).ok());
  CHECK(std::chrono::steady_clock::now() - t0 >= 80ms);
  CHECK(h.ctrl().faults().fired(id) == 1);
  // Only once: the next command is prompt.
  CHECK(status_of(h.run(q, nvme::make_read(1, 0, 1, 0, 0))).ok());
}

TEST_CASE("fault: dropped completion on the nth command", "[emulator][faults]") {
  Harness h("emu:ram,size=1M,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 8);
  Fault f;
  f.kind = FaultKind::kDropCompletion;
  f.qid = 1;
  f.opcode = nvme::nvm_op::kWrite;
  f.nth = 2;
  const int id = h.ctrl().faults().add(f);
  auto buf = h.alloc(4096);
  std::memset(buf->as(), 0x33, 4096);
  CHECK(status_of(h.run(q, nvme::make_write(1, 0, 8, buf->iova(), 0))).ok());
  CHECK(status_of(h.run(q, nvme::make_read(1, 0, 8, buf->iova(), 0))).ok());  // reads do not count
  h.submit(q, nvme::make_write(1, 8, 8, buf->iova(), 0));
  CHECK_FALSE(h.poll(q, 50ms).has_value());
  CHECK(h.ctrl().faults().fired(id) == 1);
  // The dropped command did execute.
  std::memset(buf->as(), 0, 4096);
  const uint16_t cid = h.submit(q, nvme::make_read(1, 8, 8, buf->iova(), 0));
  auto c = h.poll(q);
  REQUIRE(c.has_value());
  CHECK(c->cid == cid);
  CHECK(buf->as()[100] == 0x33);
}

TEST_CASE("fault: error status (any SCT/SC, DNR), once or every time", "[emulator][faults]") {
  Harness h("emu:null,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 8);
  Fault f;
  f.kind = FaultKind::kErrorStatus;
  f.qid = 1;
  f.opcode = nvme::nvm_op::kRead;
  f.nth = 3;
  f.sct = sct::kMediaError;
  f.sc = sc::kUnrecoveredReadError;
  f.dnr = true;
  h.ctrl().faults().add(f);
  CHECK(status_of(h.run(q, nvme::make_read(1, 0, 1, 0, 0))).ok());
  CHECK(status_of(h.run(q, nvme::make_read(1, 0, 1, 0, 0))).ok());
  auto c = h.run(q, nvme::make_read(1, 0, 1, 0, 0));
  CHECK(status_of(c).type() == sct::kMediaError);
  CHECK(status_of(c).code() == sc::kUnrecoveredReadError);
  CHECK(status_of(c).dnr());
  CHECK(status_of(h.run(q, nvme::make_read(1, 0, 1, 0, 0))).ok());

  h.ctrl().faults().clear();
  Fault every;
  every.kind = FaultKind::kErrorStatus;
  every.qid = 0;  // the admin queue
  every.opcode = nvme::admin_op::kGetFeatures;
  every.times = 0;
  every.sc = sc::kInternalError;
  const int id = h.ctrl().faults().add(every);
  for (int i = 0; i < 3; ++i)
    CHECK(is_status(h.admin_cmd(nvme::make_get_features(nvme::feature::kArbitration)), sct::kGeneric, sc::kInternalError));
  CHECK(h.ctrl().faults().fired(id) == 3);
  h.ctrl().faults().remove(id);
  CHECK(status_of(h.admin_cmd(nvme::make_get_features(nvme::feature::kArbitration))).ok());
  CHECK(h.ctrl().faults().fired(id) == 3);
}

TEST_CASE("fault: wrong CID in the CQE", "[emulator][faults]") {
  Harness h("emu:null,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 8);
  Fault f;
  f.kind = FaultKind::kWrongCid;
  f.qid = 1;
  h.ctrl().faults().add(f);
  const uint16_t cid = h.submit(q, nvme::make_read(1, 0, 1, 0, 0));
  auto c = h.poll(q);
  REQUIRE(c.has_value());
  CHECK(c->cid == uint16_t(cid ^ 0x8000));
}

TEST_CASE("fault: CSTS.CFS on the nth command stops the controller until reset", "[emulator][faults]") {
  Harness h("emu:null,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 8);
  Fault f;
  f.kind = FaultKind::kFatalOnCommand;
  f.qid = 1;
  f.nth = 2;
  h.ctrl().faults().add(f);
  CHECK(status_of(h.run(q, nvme::make_read(1, 0, 1, 0, 0))).ok());
  h.submit(q, nvme::make_read(1, 0, 1, 0, 0));
  CHECK(wait_until([&] { return h.csts().cfs(); }));
  CHECK_FALSE(h.poll(q, 20ms).has_value());
  CHECK(h.ctrl().fatal_reason().find("injected") != std::string::npos);
  // Nothing is processed, admin included.
  h.submit(h.admin(), nvme::make_get_features(nvme::feature::kArbitration));
  CHECK_FALSE(h.poll(h.admin(), 20ms).has_value());
  REQUIRE(h.disable());
  CHECK_FALSE(h.csts().cfs());
  h.enable();
  auto& q2 = h.create_pair(1, 8);
  CHECK(status_of(h.run(q2, nvme::make_read(1, 0, 1, 0, 0))).ok());
}

TEST_CASE("fault: CSTS.CFS at enable, slow ready, never ready", "[emulator][faults]") {
  Harness h("emu:ram,size=1M,ready_ms=0");
  Fault fatal;
  fatal.kind = FaultKind::kFatalAtEnable;
  h.ctrl().faults().add(fatal);
  CHECK_FALSE(h.try_enable(16, Harness::good_cc(), 500ms));
  CHECK(h.csts().cfs());
  CHECK_FALSE(h.csts().rdy());
  REQUIRE(h.disable());

  Fault slow;
  slow.kind = FaultKind::kSlowReady;
  slow.delay = std::chrono::milliseconds(150);
  h.ctrl().faults().add(slow);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(h.try_enable());
  CHECK(std::chrono::steady_clock::now() - t0 >= 150ms);
  REQUIRE(h.disable());

  Fault never;
  never.kind = FaultKind::kNeverReady;
  h.ctrl().faults().add(never);
  CHECK_FALSE(h.try_enable(16, Harness::good_cc(), 200ms));
  CHECK_FALSE(h.csts().rdy());
  CHECK_FALSE(h.csts().cfs());
  REQUIRE(h.disable());
  // Each fired once; the next enable is normal.
  h.enable();
}
