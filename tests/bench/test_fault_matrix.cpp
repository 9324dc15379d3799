// Issue #15, CPU path: each fault kind x workload recovers with every byte verified, or ends in the
// expected clear error, in bounded time. The same cells bench/fault_matrix reports.
//
// The expectations hold on a loaded machine (two suites on two cores, stress-ng). Load can deschedule
// the emulator's threads long enough that a healthy command misses its deadline. The emulator aborts
// only completions a fault holds (drop, delay), so a late healthy command's Abort does not take and the
// host resets the controller: load can add timeouts and resets, never remove the injected fault's
// trace. So the cells count what the fault must leave (its firing, its timeout, its Abort taken = a
// retry, bytes right) and bound resets by the timeouts whose Abort did not take: with no load that
// bound is exactly the old "no reset" (drop, delay) and "one reset" (wrong CID) and CSTS.CFS's one.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/generators/catch_generators_range.hpp>

#include <chrono>
#include <string>

#include "bench/fault_matrix_cells.h"
#include "host/emulator/fault_spec.h"

using namespace gpunvme;

namespace {

// A decade from each side: the injected delay (10 s, checked below) is 10x past the per-command
// timeout, so the delayed command always times out; load-induced lateness (descheduled emulator
// threads, seen at 100+ ms on a shared two-core machine) stays about 10x under it, so the injected
// command's Abort, not a load-caused reset, is what recovers it. The bench keeps 100 ms (an idle
// GPU machine).
constexpr std::chrono::milliseconds kTimeout{1000};
constexpr double kTimeoutS = std::chrono::duration<double>(kTimeout).count();
constexpr double kResetS = 0.5;  // CAP.TO of the cells' device (to=1): the longest a reset may wait

faultmx::CellOptions options() {
  faultmx::CellOptions o;
  o.timeout_ms = uint32_t(kTimeout.count());
  return o;
}

// Bounded time: the work (well under a second on an idle machine; 4 s leaves room for load), plus
// what each recovery step may cost: a timeout and an abort timeout per timed-out command, CAP.TO
// per reset. A cell that waited out an injected 10 s delay, or hung on a lost completion, exceeds it.
double time_bound(const host::RecoveryStats& s) { return 4.0 + double(s.timeouts) * 2 * kTimeoutS + double(s.resets) * kResetS; }

// Resets that the timeouts explain: one per timed-out command whose Abort did not take (every Abort
// that took came back as Command Abort Requested and was retried).
uint64_t unabortable_timeouts(const host::RecoveryStats& s) { return s.timeouts > s.retries ? s.timeouts - s.retries : 0; }

}  // namespace

TEST_CASE("fault matrix: the injected delay is far past the per-command timeout", "[bench][faults]") {
  for (const faultmx::FaultCase& f : faultmx::fault_cases()) {
    if (std::string(f.name) != "delayed past timeout") continue;
    const emu::Fault delay = emu::parse_fault_spec(f.faults);
    REQUIRE(delay.kind == emu::FaultKind::kDelayCompletion);
    CHECK(delay.delay >= 10 * kTimeout);
    return;
  }
  FAIL("no 'delayed past timeout' row in faultmx::fault_cases()");
}

TEST_CASE("fault matrix, CPU path: recovered with bytes verified, or the expected error, in bounded time",
          "[bench][faults][recovery]") {
  const auto cases = faultmx::fault_cases();
  const size_t i = GENERATE_COPY(Catch::Generators::range(size_t(0), cases.size()));
  const faultmx::FaultCase& f = cases[i];
  const faultmx::Workload w = GENERATE(faultmx::Workload::kRandomReads, faultmx::Workload::kLayerStream,
                                       faultmx::Workload::kExpertFetch);
  const faultmx::CellResult r = faultmx::run_cell(f, w, options());
  INFO(faultmx::cell_json(r));
  const host::RecoveryStats& rec = r.recovery;
  const std::string name = f.name;
  CHECK(r.as_expected);
  CHECK(r.bad_bytes == 0);
  CHECK(r.seconds < time_bound(rec));
  // The fault was injected (the long run's periodic faults may all fall past the small expert workload).
  if (!(name == "long run, periodic faults" && w == faultmx::Workload::kExpertFetch)) CHECK(r.faults_fired >= 1);
  if (f.recovers) {
    CHECK(r.recovered);
    CHECK(r.bytes_verified > 0);
  }
  if (name == "error, DNR clear") CHECK(rec.retries >= 1);
  if (name == "error, DNR set") CHECK(rec.retries == 0);
  // The held completion timed out, its Abort took (only a held completion can be aborted, so the retry
  // is the injected command's), and any reset was for a healthy command made late by load.
  if (name == "dropped completion" || name == "delayed past timeout") {
    CHECK(rec.timeouts >= 1);
    CHECK(rec.aborts >= 1);
    CHECK(rec.retries >= 1);
    CHECK(rec.resets <= unabortable_timeouts(rec));
  }
  if (name == "delayed past timeout") CHECK(r.seconds < 10.0);  // recovered long before the delay ended
  if (name == "CSTS.CFS") {
    CHECK(rec.resets >= 1);
    CHECK(rec.resets <= 1 + unabortable_timeouts(rec));
  }
  // The real command's completion went out under another id: the Abort finds nothing, a reset follows.
  if (name == "wrong CID") {
    CHECK(rec.protocol_errors == 1);
    CHECK(rec.resets >= 1);
    CHECK(rec.resets <= unabortable_timeouts(rec));
  }
  // Final errors come without a retry storm: removal is seen at the first deadline scan, before any
  // command could time out; a controller that never comes back is reset once (whatever started it).
  if (name == "surprise removal") {
    CHECK(rec.aborts == 0);
    CHECK(rec.resets == 0);
    CHECK(r.seconds < kTimeoutS);
  }
  if (name == "never ready after reset") CHECK(rec.resets == 1);
}

TEST_CASE("long run: a fault every few thousand commands, all data verified", "[bench][faults][recovery]") {
  // ~40,000 reads and ~9,000 layer commands with five fault kinds interleaved.
  const faultmx::FaultCase f{"long run", "error:sct=2:sc=0x81:every=3000;drop:every=7000;cfs:every=11000;"
                                         "wrong-cid:every=13000;delay:by=2ms:every=2000",
                             true, ErrorKind::kTimeout, ""};
  faultmx::CellOptions o = options();
  o.reads = 40000;
  o.layers = 3000;
  for (faultmx::Workload w : {faultmx::Workload::kRandomReads, faultmx::Workload::kLayerStream}) {
    const faultmx::CellResult r = faultmx::run_cell(f, w, o);
    INFO(faultmx::cell_json(r));
    CHECK(r.as_expected);
    CHECK(r.bad_bytes == 0);
    CHECK(r.recovery.retries >= 3);
    CHECK(r.recovery.aborts >= 1);
    if (w == faultmx::Workload::kRandomReads) CHECK(r.recovery.resets >= 2);  // CFS and wrong CID at least once each
    CHECK(r.seconds < time_bound(r.recovery));
  }
}
