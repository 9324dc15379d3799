// The faults recovery is built on: Abort of a held completion, surprise removal, periodic and timed
// faults, and faults armed from the device string.
#include <catch2/matchers/catch_matchers_string.hpp>

#include <chrono>
#include <thread>

#include "host/emulator/fault_spec.h"
#include "tests/emulator/harness.h"

using namespace emutest;
using Catch::Matchers::ContainsSubstring;
using gpunvme::emu::Fault;
using gpunvme::emu::FaultKind;
namespace sc = gpunvme::nvme::sc;
namespace sct = gpunvme::nvme::sct;

TEST_CASE("abort: a dropped completion is posted as Command Abort Requested", "[emulator][abort]") {
  Harness h("emu:ram,size=1M,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 8);
  Fault f;
  f.kind = FaultKind::kDropCompletion;
  f.qid = 1;
  h.ctrl().faults().add(f);
  auto buf = h.alloc(4096);
  const uint16_t lost = h.submit(q, nvme::make_read(1, 0, 8, buf->iova(), 0));
  CHECK_FALSE(h.poll(q, 30ms).has_value());
  // On a loaded machine the controller may not have fetched the read within those 30 ms, and an
  // abort then finds nothing to abort: ask again (bounded) until it has.
  auto a = h.admin_cmd(nvme::make_abort(1, lost));
  for (const auto end = std::chrono::steady_clock::now() + 5s;
       status_of(a).ok() && !nvme::abort_took_effect(a.dw0) && std::chrono::steady_clock::now() < end;) {
    std::this_thread::sleep_for(5ms);
    a = h.admin_cmd(nvme::make_abort(1, lost));
  }
  CHECK(status_of(a).ok());
  CHECK(nvme::abort_took_effect(a.dw0));
  auto c = h.poll(q);
  REQUIRE(c.has_value());
  CHECK(c->cid == lost);
  CHECK(is_status(*c, sct::kGeneric, sc::kAbortRequested));
  CHECK_FALSE(status_of(*c).dnr());
  // Aborting it again, or a command that never existed, is "not aborted".
  CHECK_FALSE(nvme::abort_took_effect(h.admin_cmd(nvme::make_abort(1, lost)).dw0));
  CHECK_FALSE(nvme::abort_took_effect(h.admin_cmd(nvme::make_abort(1, 999)).dw0));
  CHECK_FALSE(nvme::abort_took_effect(h.admin_cmd(nvme::make_abort(7, 1)).dw0));
  // The queue goes on.
  CHECK(status_of(h.run(q, nvme::make_read(1, 0, 8, buf->iova(), 0))).ok());
}

TEST_CASE("abort: a delayed completion comes at once when aborted", "[emulator][abort]") {
  Harness h("emu:null,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 8);
  Fault f;
  f.kind = FaultKind::kDelayCompletion;
  f.qid = 1;
  f.delay = std::chrono::seconds(30);
  h.ctrl().faults().add(f);
  const auto t0 = std::chrono::steady_clock::now();
  const uint16_t slow = h.submit(q, nvme::make_read(1, 0, 1, 0, 0));
  CHECK_FALSE(h.poll(q, 20ms).has_value());
  CHECK(nvme::abort_took_effect(h.admin_cmd(nvme::make_abort(1, slow)).dw0));
  auto c = h.poll(q, 2000ms);
  REQUIRE(c.has_value());
  CHECK(c->cid == slow);
  CHECK(is_status(*c, sct::kGeneric, sc::kAbortRequested));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}

TEST_CASE("surprise removal: BAR0 reads all ones and nothing more happens", "[emulator][removal]") {
  Harness h("emu:ram,size=1M,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 8);
  Fault f;
  f.kind = FaultKind::kSurpriseRemoval;
  f.qid = 1;
  f.nth = 2;
  h.ctrl().faults().add(f);
  auto buf = h.alloc(4096);
  CHECK(status_of(h.run(q, nvme::make_read(1, 0, 8, buf->iova(), 0))).ok());
  h.submit(q, nvme::make_read(1, 0, 8, buf->iova(), 0));
  REQUIRE(wait_until([&] { return h.read32(nvme::reg::kCsts) == 0xFFFFFFFFu; }, 2000ms));
  CHECK(h.read32(nvme::reg::kCc) == 0xFFFFFFFFu);
  CHECK(h.read32(nvme::reg::kVs) == 0xFFFFFFFFu);
  CHECK_FALSE(h.poll(q, 30ms).has_value());
  // A reset attempt changes nothing: the device stays gone.
  h.write32(nvme::reg::kCc, 0);
  std::this_thread::sleep_for(20ms);
  CHECK(h.read32(nvme::reg::kCsts) == 0xFFFFFFFFu);
}

TEST_CASE("periodic and timed faults", "[emulator][faults]") {
  Harness h("emu:null,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 16);
  SECTION("every=N fires on the Nth, 2Nth, ... match, without limit") {
    Fault f;
    f.kind = FaultKind::kErrorStatus;
    f.qid = 1;
    f.nth = 3;
    f.every = 3;
    f.times = 0;
    const int id = h.ctrl().faults().add(f);
    std::string pattern;
    for (int i = 0; i < 12; ++i) pattern += status_of(h.run(q, nvme::make_read(1, 0, 1, 0, 0))).ok() ? '.' : 'E';
    CHECK(pattern == "..E..E..E..E");
    CHECK(h.ctrl().faults().fired(id) == 4);
  }
  SECTION("coinciding periods: both faults keep their count (the later one fires a command later)") {
    Fault a;
    a.kind = FaultKind::kErrorStatus;
    a.qid = 1;
    a.nth = a.every = 2;
    a.times = 0;
    a.sc = 0x06;
    Fault b = a;
    b.nth = b.every = 4;
    b.sc = 0x04;
    const int ia = h.ctrl().faults().add(a);
    const int ib = h.ctrl().faults().add(b);
    std::string pattern;
    for (int i = 0; i < 9; ++i) {
      const auto c = h.run(q, nvme::make_read(1, 0, 1, 0, 0));
      pattern += status_of(c).ok() ? '.' : status_of(c).code() == 0x06 ? 'a' : 'b';
    }
    CHECK(pattern == ".a.aba.ab");  // b was due on commands 4 and 8 (a's): it fires on the next match
    CHECK(h.ctrl().faults().fired(ia) == 4);
    CHECK(h.ctrl().faults().fired(ib) == 2);
  }
  SECTION("at=DUR counts nothing before that time") {
    Fault f;
    f.kind = FaultKind::kErrorStatus;
    f.qid = 1;
    f.at = std::chrono::milliseconds(150);
    const int id = h.ctrl().faults().add(f);
    CHECK(status_of(h.run(q, nvme::make_read(1, 0, 1, 0, 0))).ok());
    std::this_thread::sleep_for(200ms);
    CHECK_FALSE(status_of(h.run(q, nvme::make_read(1, 0, 1, 0, 0))).ok());
    CHECK(status_of(h.run(q, nvme::make_read(1, 0, 1, 0, 0))).ok());
    CHECK(h.ctrl().faults().fired(id) == 1);
  }
}

TEST_CASE("fault= in the device string arms the plan; I/O queues only by default", "[emulator][faults][config]") {
  Harness h("emu:null,ready_ms=0,fault=error:sct=2:sc=0x81:every=2,fault=delay:by=1ms:q=1:op=read:nth=1");
  h.enable();  // admin commands are not counted (q=io by default)
  auto& q = h.create_pair(1, 8);
  auto c1 = h.run(q, nvme::make_read(1, 0, 1, 0, 0));
  CHECK(status_of(c1).ok());
  auto c2 = h.run(q, nvme::make_read(1, 0, 1, 0, 0));
  CHECK(is_status(c2, sct::kMediaError, sc::kUnrecoveredReadError));
  CHECK_FALSE(status_of(c2).dnr());
}

TEST_CASE("fault specs: the grammar and its errors", "[emulator][config]") {
  using gpunvme::emu::parse_fault_spec;
  Fault f = parse_fault_spec("error:sct=2:sc=0x81:dnr=1:every=5000");
  CHECK(f.kind == FaultKind::kErrorStatus);
  CHECK(f.sct == 2);
  CHECK(f.sc == 0x81);
  CHECK(f.dnr);
  CHECK(f.every == 5000);
  CHECK(f.nth == 5000);
  CHECK(f.times == 0);
  CHECK(f.qid == gpunvme::emu::kAnyIoQueue);
  f = parse_fault_spec("drop");
  CHECK(f.kind == FaultKind::kDropCompletion);
  CHECK(f.nth == 1);
  CHECK(f.times == 1);
  f = parse_fault_spec("cfs:at=2s:q=admin");
  CHECK(f.at == std::chrono::seconds(2));
  CHECK(f.qid == 0);
  f = parse_fault_spec("never-ready:nth=2");
  CHECK(f.kind == FaultKind::kNeverReady);
  CHECK(f.nth == 2);
  f = parse_fault_spec("removal:nth=500:op=write");
  CHECK(f.kind == FaultKind::kSurpriseRemoval);
  CHECK(f.opcode == nvme::nvm_op::kWrite);
  f = parse_fault_spec("wrong-cid:xor=0x4000:times=0");
  CHECK(f.cid_xor == 0x4000);
  f = parse_fault_spec("delay:by=250us");
  CHECK(f.delay == std::chrono::microseconds(250));

  const std::pair<const char*, const char*> bad[] = {
      {"explode", "unknown fault kind"},
      {"error:sc=0x100", "larger than 255"},
      {"error:sc=0x8g", "is not a code"},
      {"error:sct=8", "larger than 7"},
      {"error:dnr=yes", "must be 0 or 1"},
      {"drop:every=0", "counts start at 1"},
      {"drop:nth=-1", "no sign"},
      {"drop:every=010", "leading zero"},
      {"delay", "needs by=DUR"},
      {"delay:by=5", "is not a duration"},
      {"drop:by=5ms", "applies to delay and slow-ready only"},
      {"drop:sc=1", "apply to error only"},
      {"never-ready:q=1", "not to enable faults"},
      {"drop:q=70000", "not a queue id"},
      {"drop:op=erase", "not an opcode"},
      {"drop:every=2:every=3", "given twice"},
      {"drop:", "empty option"},
      {"drop:nth=2:", "trailing ':'"},
      {"delay:by=0ms", "delays nothing"},
      {"slow-ready:by=0s", "delays nothing"},
      {"error:sc=0x81:every=5:", "trailing ':'"},
      {"drop:q=admin:op=read", "never fires: those are I/O commands"},
      {"error:op=flush:q=0", "never fires: those are I/O commands"},
      {"drop:every", "not KEY=VALUE"},
      {"drop:speed=3", "unknown key"},
      {"wrong-cid:xor=0", "0 would change nothing"},
  };
  for (const auto& [spec, why] : bad) {
    INFO(spec);
    CHECK_THROWS_WITH(parse_fault_spec(spec), ContainsSubstring(why) && ContainsSubstring("form: fault=KIND"));
  }
  // Through the device string: fault= may repeat, other keys still may not.
  CHECK(gpunvme::emu::parse_emu_device("emu:ram,fault=drop,fault=cfs:at=1s").faults.size() == 2);
  CHECK_THROWS_WITH(gpunvme::emu::parse_emu_device("emu:ram,fault=drop:every=x"), ContainsSubstring("every"));
  // A queue the controller does not have: the fault would never fire (queues= may come after fault=).
  CHECK_THROWS_WITH(gpunvme::emu::parse_emu_device("emu:ram,fault=error:q=99"),
                    ContainsSubstring("fault=error:q=99: q=99 never fires: the controller has I/O queues 1..64"));
  CHECK_THROWS_WITH(gpunvme::emu::parse_emu_device("emu:ram,fault=drop:q=5,queues=4"),
                    ContainsSubstring("q=5 never fires") && ContainsSubstring("queues=4"));
  CHECK(gpunvme::emu::parse_emu_device("emu:ram,fault=drop:q=4,queues=4").faults.at(0).qid == 4);
  CHECK(gpunvme::emu::parse_emu_device("emu:ram,fault=error:q=admin:op=0x06").faults.at(0).qid == 0);  // Identify
}
