// Recovery on the GPU path, against the emulated controller's fault plan (host/emulator/faults.h):
// the kernels re-issue commands that fail with DNR clear (driver/retry_policy.h, the CPU path's rule),
// the submitter's watchdog aborts (Admin Abort) a command whose completion is lost or late, and the
// kernels re-issue it on its Command Abort Requested completion; it resets the controller under
// running kernels when CSTS.CFS is set or a queue faulted (runtime/stream/gpu_recovery.h).
// Both doorbell modes (doorbell=cpu: the forwarder follows the reset). Each fault kind on each GPU workload (layer
// streaming of 1,000 small layers, expert fetch, raw reads) must end recovered with every byte
// verified, or with the expected clear error, within a stated time. Skips without a CUDA GPU.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "device/queue_set.h"
#include "gpu_rig.h"
#include "host/emulator/fault_spec.h"
#include "host/emulator/faults.h"
#include "host/error.h"
#include "host/recovery.h"
#include "recovery_check.h"
#include "runtime/stream/gpu_expert_fetcher.h"
#include "runtime/stream/gpu_submitter.h"
#include "runtime/stream/layer_streamer.h"
#include "stream_check.h"
#include "stream_fixtures.h"

using namespace gpunvme;
using test::DeviceBlob;
using test::DeviceZeros;
using test::GpuRig;
using test::Streams;
using test::VerifySpan;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr uint64_t kSeed = 77;
constexpr uint64_t kPatternBytes = 72ull << 20;
constexpr uint16_t kFaultQid = 2;  // the rig's first GPU queue (qid 1 is its CPU queue)

// The watchdog decides within 100 ms; the kernels' own bound (the backstop) is much longer.
stream::GpuSubmitterOptions recovering(device::DoorbellMode doorbell = device::DoorbellMode::kAuto) {
  stream::GpuSubmitterOptions o;
  o.timeout_ns = 5'000'000'000;
  o.recovery.stall_timeout = std::chrono::milliseconds(100);
  o.recovery.abort_timeout = std::chrono::milliseconds(200);
  o.recovery.check_period = std::chrono::microseconds(500);
  o.doorbell = doorbell;
  return o;
}

// 1,000 small layers: two tensors each with unaligned starts and ends, 64 KiB apart per layer.
std::vector<std::vector<model::Extent>> small_layers(uint32_t n, uint32_t lba) {
  std::vector<std::vector<model::Extent>> layers(n);
  for (uint32_t l = 0; l < n; ++l) {
    const uint64_t base = uint64_t(l) * (64 << 10);
    layers[l].push_back(model::byte_range_to_extent(base + 37, 20000 + (l % 7) * 512, lba, 0));
    layers[l].push_back(model::byte_range_to_extent(base + 32768 + 100, 9000, lba, 0));
  }
  return layers;
}

// What a workload ended with.
struct Outcome {
  bool threw = false;
  ErrorKind kind = ErrorKind::kIo;
  std::string error;
  uint64_t mismatches = 0;  // bytes that differ from the pattern, in units that finished OK
  uint64_t units_ok = 0;    // layers / tokens / reads that finished OK and were checked
  uint64_t units = 0;
  double seconds = 0;
};

void record_error(Outcome& o, const Error& e) {
  if (o.threw) return;
  o.threw = true;
  o.kind = e.kind();
  o.error = e.what();
}

// Layer streaming, GPU ordered: a kernel per layer issues its reads, a consumer kernel per layer
// checks every byte of the slot and the ticket's state word, double buffered.
Outcome stream_layers(GpuRig& rig, stream::GpuSubmitter& gpu, uint32_t n_layers, uint32_t passes = 1) {
  Outcome o;
  stream::LayerStreamer s(*rig.ctrl, gpu, small_layers(n_layers, rig.lba), {.slots = 2});
  Streams st;
  const test::LayerSpans table = test::layer_spans(s, n_layers, rig.lba);
  const std::vector<uint32_t>& first = table.first;
  DeviceBlob d_all(table.spans.data(), table.spans.size() * sizeof(VerifySpan));
  const uint32_t total = n_layers * passes;
  DeviceZeros<uint64_t> bad(total);
  DeviceZeros<uint32_t> seen(total);
  const auto t0 = Clock::now();
  try {
    s.begin(0, 0, st.s_io());
    for (uint32_t k = 0; k < total; ++k) {
      if (k + 1 < total) s.begin((k + 1) % n_layers, (k + 1) % 2, st.s_io());
      const stream::SlotView v = s.wait(k % 2, st.s_compute());
      const uint32_t l = k % n_layers;
      test::enqueue_verify_slot(st.s_compute(), static_cast<const uint8_t*>(v.device), d_all.as<VerifySpan>() + first[l],
                                first[l + 1] - first[l], kSeed, 0, v.status, bad.p + k, seen.p + k);
      s.release(k % 2, st.s_compute());
      // Now and then the host waits for what it enqueued (tickets are bounded; the watchdog runs).
      if (k % 256 == 255) {
        try {
          s.sync();
        } catch (const Error& e) {
          record_error(o, e);
        }
      }
    }
  } catch (const Error& e) {
    record_error(o, e);
  }
  try {
    s.sync();
  } catch (const Error& e) {
    record_error(o, e);
  }
  o.seconds = seconds_since(t0);
  const std::vector<uint64_t> mism = bad.get();
  const std::vector<uint32_t> states = seen.get();
  o.units = total;
  for (uint32_t k = 0; k < total; ++k) {
    if (states[k] != stream::ticket_state::kOk) continue;
    o.units_ok += 1;
    o.mismatches += mism[k];
  }
  return o;
}

// Expert fetch: routing ids in GPU memory, reads placed and pumped on the GPU, a consumer kernel per
// token checks every fetched expert's bytes.
Outcome fetch_experts(GpuRig& rig, stream::GpuSubmitter& gpu, uint32_t tokens) {
  Outcome o;
  std::vector<uint64_t> ns_off;
  const uint32_t n_layers = 3, n_experts = 16, k = 8, distinct = 4;
  const stream::ExpertCatalog catalog = test::make_catalog(n_layers, n_experts, rig.lba, &ns_off);
  DeviceBlob d_ns(ns_off.data(), ns_off.size() * 8);
  stream::FetcherOptions fo;
  fo.max_experts_per_fetch = distinct;
  stream::GpuExpertFetcher f(*rig.ctrl, gpu, catalog, fo);
  Streams st;
  DeviceZeros<uint32_t> ids(k);
  DeviceZeros<uint64_t> bad(tokens);
  const auto t0 = Clock::now();
  std::vector<bool> ok(tokens, false);
  for (uint32_t t = 0; t < tokens; ++t) {
    const uint32_t layer = t % n_layers;
    try {
      test::enqueue_toy_router(st.s_compute(), ids.p, k, t, n_experts, distinct);
      f.fetch(layer, ids.p, k, st.s_compute());
      test::enqueue_verify_fetch(st.s_compute(), f, d_ns.as<uint64_t>(), layer, n_experts, kSeed, bad.p + t);
      f.wait();
      ok[t] = true;
    } catch (const Error& e) {
      record_error(o, e);
    }
  }
  o.seconds = seconds_since(t0);
  const std::vector<uint64_t> mism = bad.get();
  o.units = tokens;
  for (uint32_t t = 0; t < tokens; ++t) {
    if (!ok[t]) continue;
    o.units_ok += 1;
    o.mismatches += mism[t];
  }
  return o;
}

// Raw reads through the submitter: `n` 4 KiB reads from scattered LBAs in one ticket (the unit);
// bytes checked on the host.
Outcome raw_reads(GpuRig& rig, stream::GpuSubmitter& gpu, uint32_t n, uint64_t pattern_bytes = kPatternBytes) {
  Outcome o;
  host::DmaBuffer dst = rig.gpu_buffer(uint64_t(n) * 4096);
  std::vector<nvme::SubmissionEntry> cmds;
  std::vector<uint64_t> ns_offset;
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t off = uint64_t((i * 7919u) % (uint32_t(pattern_bytes / 4096))) * 4096;
    ns_offset.push_back(off);
    cmds.push_back(nvme::make_read(1, off / rig.lba, 4096 / rig.lba, dst.bus(uint64_t(i) * 4096), 0));
  }
  const auto t0 = Clock::now();
  try {
    gpu.wait(gpu.issue(cmds));
    o.units_ok = 1;
  } catch (const Error& e) {
    record_error(o, e);
  }
  o.seconds = seconds_since(t0);
  o.units = 1;
  if (o.units_ok) {
    std::vector<uint8_t> want(4096);
    for (uint32_t i = 0; i < n; ++i) {
      test::fill_ns_pattern(want.data(), 4096, ns_offset[i], kSeed);
      for (uint32_t b = 0; b < 4096; ++b) o.mismatches += dst.as<uint8_t>()[uint64_t(i) * 4096 + b] != want[b];
    }
  }
  return o;
}

enum class Workload { kLayers, kExperts, kRaw };
const char* name_of(Workload w) {
  return w == Workload::kLayers ? "layer streaming (1,000 layers)" : w == Workload::kExperts ? "expert fetch" : "raw reads";
}

Outcome run(Workload w, GpuRig& rig, stream::GpuSubmitter& gpu) {
  switch (w) {
    case Workload::kLayers: return stream_layers(rig, gpu, 1000);
    case Workload::kExperts: return fetch_experts(rig, gpu, 40);
    case Workload::kRaw: return raw_reads(rig, gpu, 2000);
  }
  return {};
}

enum class Kind { kRetryable, kDnr, kDrop, kDelay, kFatal, kWrongCid };
const char* name_of(Kind k) {
  switch (k) {
    case Kind::kRetryable: return "error status, DNR clear";
    case Kind::kDnr: return "error status, DNR set";
    case Kind::kDrop: return "dropped completion";
    case Kind::kDelay: return "completion delayed past the stall bound";
    case Kind::kFatal: return "CSTS.CFS";
    case Kind::kWrongCid: return "completion with a wrong command id";
  }
  return "?";
}

emu::Fault fault_of(Kind k, uint64_t nth) {
  emu::Fault f;
  f.qid = kFaultQid;
  f.opcode = nvme::nvm_op::kRead;
  f.nth = nth;
  switch (k) {
    case Kind::kRetryable:
      f.kind = emu::FaultKind::kErrorStatus;
      f.sct = nvme::sct::kMediaError;
      f.sc = nvme::sc::kUnrecoveredReadError;
      f.dnr = false;
      f.times = 2;  // the command and its first re-issue fail: two retries
      break;
    case Kind::kDnr:
      f.kind = emu::FaultKind::kErrorStatus;
      f.sct = nvme::sct::kMediaError;
      f.sc = nvme::sc::kUnrecoveredReadError;
      f.dnr = true;
      break;
    case Kind::kDrop: f.kind = emu::FaultKind::kDropCompletion; break;
    case Kind::kDelay:
      f.kind = emu::FaultKind::kDelayCompletion;
      f.delay = std::chrono::milliseconds(1500);
      break;
    case Kind::kFatal: f.kind = emu::FaultKind::kFatalOnCommand; break;
    case Kind::kWrongCid: f.kind = emu::FaultKind::kWrongCid; break;  // cid ^ 0x8000: never in flight
  }
  return f;
}

}  // namespace

TEST_CASE("the GPU decides retries exactly as the host: driver/retry_policy.h over a table", "[gpu][recovery][policy]") {
  REQUIRE_GPU();
  std::vector<test::RetryCase> cases;
  const nvme::Status statuses[] = {
      nvme::Status{},
      nvme::Status::make(nvme::sct::kMediaError, nvme::sc::kUnrecoveredReadError, false),
      nvme::Status::make(nvme::sct::kMediaError, nvme::sc::kUnrecoveredReadError, true),
      nvme::Status::make(nvme::sct::kGeneric, nvme::sc::kInternalError, false),
      // An aborted command's completion (the watchdog's Abort): retried on both paths.
      nvme::Status::make(nvme::sct::kGeneric, nvme::sc::kAbortRequested, false),
      nvme::Status::make(nvme::sct::kGeneric, nvme::sc::kLbaOutOfRange, true),
      nvme::Status::make(nvme::sct::kGeneric, nvme::sc::kNamespaceNotReady, false),
      nvme::Status::make(nvme::sct::kPathRelated, 0x00, false),
      nvme::Status{0x7FFF},
  };
  for (const nvme::Status& st : statuses)
    for (uint32_t a = 0; a <= 12; ++a) cases.push_back({st, a});
  const nvme::RetryPolicy policies[] = {nvme::kDefaultRetryPolicy,
                                        {.max_attempts = 1},
                                        {.max_attempts = 9, .backoff_base_ns = 3, .backoff_cap_ns = 1000},
                                        {.max_attempts = 200, .backoff_base_ns = 7, .backoff_cap_ns = UINT64_MAX}};
  for (const nvme::RetryPolicy& p : policies) {
    for (const bool after_timeout : {false, true}) {
      const std::vector<nvme::RetryDecision> gpu = test::gpu_decide_retry(cases, p, after_timeout);
      REQUIRE(gpu.size() == cases.size());
      for (size_t i = 0; i < cases.size(); ++i) {
        const nvme::RetryDecision host = after_timeout ? nvme::decide_retry_after_timeout(cases[i].attempts, p)
                                                       : nvme::decide_retry(cases[i].status, cases[i].attempts, p);
        INFO("status 0x" << std::hex << cases[i].status.field << std::dec << ", attempts " << cases[i].attempts
                         << ", max_attempts " << p.max_attempts << (after_timeout ? ", after a timeout" : ""));
        CHECK(int(gpu[i].action) == int(host.action));
        CHECK(gpu[i].backoff_ns == host.backoff_ns);
      }
    }
  }
}

TEST_CASE("the pump spends exactly the attempts the policy allows on one failing command", "[gpu][recovery][policy]") {
  REQUIRE_GPU();
  // One queue at depth 1: consecutive faulted reads are the same command's re-issues.
  for (const uint64_t failures : {1ull, 3ull, 4ull, 5ull, 8ull}) {
    DYNAMIC_SECTION(failures << " consecutive failures of the 3rd read") {
      GpuRig rig("emu:ram,size=16M,threads=1", 1, 16, true, {}, false);
      rig.write_pattern(0, 4 << 20, kSeed);
      stream::GpuSubmitterOptions o = recovering();
      o.depth = 1;
      o.retry = {.max_attempts = 5, .backoff_base_ns = 10'000, .backoff_cap_ns = 40'000};
      stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1, o);
      emu::Fault f = fault_of(Kind::kRetryable, 3);
      f.times = failures;
      const int id = rig.emu->faults().add(f);
      const auto t0 = Clock::now();
      const Outcome out = raw_reads(rig, gpu, 8, 4 << 20);
      // The host's reading of the same rule, command by command from the 3rd: each failing
      // submission either earns a retry or, with the attempts spent, is the command's final error.
      const nvme::Status st = nvme::Status::make(nvme::sct::kMediaError, nvme::sc::kUnrecoveredReadError, false);
      uint64_t left = failures, retries = 0, finals = 0;
      for (uint32_t cmd = 3; cmd <= 8 && left > 0; ++cmd) {
        for (uint32_t attempts = 1; left > 0; ++attempts) {
          --left;
          if (nvme::decide_retry(st, attempts, o.retry).action == nvme::RetryAction::kFinal) {
            ++finals;
            break;
          }
          ++retries;
        }
      }
      const host::RecoveryStats rec = gpu.recovery();
      INFO(out.error << "; " << host::recovery_text(rec));
      CHECK(rig.emu->faults().fired(id) == failures);
      CHECK(rec.retries == retries);
      CHECK(rec.failed == finals);
      CHECK(out.threw == (finals > 0));
      if (finals > 0) {
        CHECK(out.kind == ErrorKind::kCommandFailed);
        CHECK(out.error.find("LBA") != std::string::npos);
        CHECK(out.error.find("Unrecovered Read Error") != std::string::npos);
      } else {
        CHECK(out.mismatches == 0);
      }
      CHECK(seconds_since(t0) < 2.0);
    }
  }
}

TEST_CASE("GPU recovery matrix: each fault on each GPU workload recovers with every byte verified, or fails clearly",
          "[gpu][recovery][matrix]") {
  REQUIRE_GPU();
  const Kind kind = GENERATE(Kind::kRetryable, Kind::kDnr, Kind::kDrop, Kind::kDelay, Kind::kFatal, Kind::kWrongCid);
  const Workload work = GENERATE(Workload::kLayers, Workload::kExperts, Workload::kRaw);
  const device::DoorbellMode doorbell = GENERATE(device::DoorbellMode::kGpu, device::DoorbellMode::kCpu);
  INFO(name_of(kind) << " during " << name_of(work) << ", doorbell=" << device::doorbell_mode_name(doorbell));
  GpuRig rig("emu:ram,size=96M,threads=2", 2, 128, true, {}, false);
  rig.write_pattern(0, kPatternBytes, kSeed);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1, recovering(doorbell));
  REQUIRE(gpu.queues().doorbell_mode() == doorbell);
  const int id = rig.emu->faults().add(fault_of(kind, 40));
  const Outcome out = run(work, rig, gpu);
  const host::RecoveryStats rec = gpu.recovery();
  INFO("error: " << out.error << "; " << out.units_ok << " of " << out.units << " units ok, " << out.seconds << " s, "
                 << host::recovery_text(rec) << " (" << gpu.last_recovery_reason() << ")");
  CHECK(rig.emu->faults().fired(id) >= 1);
  CHECK(out.mismatches == 0);  // every unit that finished OK holds the right bytes
  switch (kind) {
    case Kind::kRetryable:
      CHECK_FALSE(out.threw);
      CHECK(out.units_ok == out.units);
      CHECK(rec.retries == 2);
      CHECK(rec.resets == 0);
      CHECK(out.seconds < 10.0);
      break;
    case Kind::kDnr:
      CHECK(out.threw);
      CHECK(out.kind == ErrorKind::kCommandFailed);
      CHECK(out.error.find("DNR") != std::string::npos);
      CHECK(out.error.find("LBA") != std::string::npos);
      // Only the unit holding the failed read: the streamer and the fetcher go on with later units.
      CHECK(out.units_ok + 1 == out.units);
      CHECK(rec.retries == 0);
      CHECK(rec.failed == 1);
      // A final error ends its unit at once: no kernel, consumer or watchdog bound is waited out.
      CHECK(out.seconds < 1.0);
      break;
    case Kind::kDrop:
    case Kind::kDelay:
      // The issue's discipline: the overdue command is aborted, its Abort Requested completion
      // re-issued by the warp (one retry); no controller reset.
      CHECK_FALSE(out.threw);
      CHECK(out.units_ok == out.units);
      CHECK(rec.timeouts >= 1);
      CHECK(rec.aborts >= 1);
      CHECK(rec.retries >= 1);
      CHECK(rec.resets == 0);
      CHECK(rig.ctrl->resets() == 0);
      // The bound (100 ms) plus the Abort, well inside the kernels' own 5 s bound.
      CHECK(out.seconds < 10.0);
      break;
    case Kind::kFatal:
      CHECK_FALSE(out.threw);
      CHECK(out.units_ok == out.units);
      CHECK(rec.resets == 1);
      CHECK(rec.resubmitted >= 1);
      CHECK(rig.ctrl->resets() == 1);
      // CSTS is read every 10th check (5 ms), then the reset, well inside the kernels' own 5 s bound.
      CHECK(rec.seconds_lost < 2.0);
      CHECK(out.seconds < 10.0);
      break;
    case Kind::kWrongCid:
      CHECK(out.threw);
      CHECK(out.error.find("command id not in flight") != std::string::npos);
      CHECK(rec.protocol_errors >= 1);
      CHECK(rec.resets == 1);  // the faulted queue is rebuilt once; the clean run below proves it
      // The faulted queue hands its unfinished commands to their consumers as failed at once
      // (warp_recovery.cuh fail_unfinished): the expert fetch's consumer does not wait out its bound.
      CHECK(out.seconds < 1.0);
      break;
  }
  // The matrix's row, printed with -s or on the summary (the issue's report: outcome and time).
  WARN("fault matrix | " << name_of(kind) << " | " << name_of(work) << " | doorbell="
                         << device::doorbell_mode_name(doorbell) << " | "
                         << (out.threw ? "failed: " + out.error.substr(0, 160) : std::string("recovered, bytes verified"))
                         << " | " << out.units_ok << "/" << out.units << " units | " << out.seconds << " s | "
                         << host::recovery_text(rec));
  // Whatever happened, the submitter works afterwards: a clean run of raw reads.
  rig.emu->faults().clear();
  const Outcome after = raw_reads(rig, gpu, 300);
  INFO("after: " << after.error);
  CHECK_FALSE(after.threw);
  CHECK(after.mismatches == 0);
}

TEST_CASE("GPU recovery: a controller that cannot come back ends the kernels with one clear error in bounded time",
          "[gpu][recovery][removal]") {
  REQUIRE_GPU();
  const bool removal = GENERATE(true, false);
  INFO((removal ? "surprise removal (BAR0 reads all ones)" : "CSTS.CFS, then CSTS.RDY never set after the reset"));
  // to=1: CAP.TO 500 ms, the bound of the reset's wait for CSTS.RDY.
  GpuRig rig("emu:ram,size=96M,threads=2,to=1", 2, 128, true, {}, false);
  rig.write_pattern(0, kPatternBytes, kSeed);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1, recovering());
  emu::Fault f = fault_of(Kind::kFatal, 40);  // CFS: only a reset helps (a lost completion is aborted)
  if (removal) f.kind = emu::FaultKind::kSurpriseRemoval;
  rig.emu->faults().add(f);
  if (!removal) {
    emu::Fault never;
    never.kind = emu::FaultKind::kNeverReady;
    rig.emu->faults().add(never);
  }
  const auto t0 = Clock::now();
  const Outcome out = stream_layers(rig, gpu, 1000);
  const double secs = seconds_since(t0);
  INFO(out.error << " (" << gpu.last_recovery_reason() << ")");
  CHECK(out.threw);
  CHECK(out.kind == ErrorKind::kControllerFatal);
  CHECK(out.error.find("could not be reset") != std::string::npos);
  CHECK(out.error.find(removal ? "all ones" : "CSTS.RDY stayed 0") != std::string::npos);
  CHECK(gpu.recovery().resets == 0);  // the one attempt failed; no second one
  CHECK(out.mismatches == 0);         // the layers that finished before hold the right bytes
  // Detection (100 ms stall bound, or CSTS every 5 ms), the reset's bound (CAP.TO 500 ms), then
  // every queued layer ends at once.
  CHECK(secs < 5.0);
  WARN("fault matrix | " << (removal ? "surprise removal" : "never ready after reset") << " | layer streaming | "
                         << out.error.substr(0, 160) << " | " << secs << " s");
  // Later tickets fail at once with the same reason: no retry storm.
  const auto t1 = Clock::now();
  const Outcome again = raw_reads(rig, gpu, 50);
  CHECK(again.threw);
  CHECK(again.error.find("could not be reset") != std::string::npos);
  CHECK(seconds_since(t1) < 1.0);
}

TEST_CASE("GPU long run: 4 x 1,000 layers (8,000 reads) with a fault every 1,800 reads, every byte verified",
          "[gpu][recovery][long]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=96M,threads=2", 2, 128, true, {}, false);
  rig.write_pattern(0, kPatternBytes, kSeed);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1, recovering());
  // Alternating retryable errors and lost completions, spread over the run (both GPU queues).
  std::vector<int> ids;
  for (uint64_t k = 1; k <= 4; ++k) {
    emu::Fault f = fault_of(k % 2 ? Kind::kRetryable : Kind::kDrop, k * 1800);
    f.qid = emu::kAnyIoQueue;
    f.times = 1;
    ids.push_back(rig.emu->faults().add(f));
  }
  const Outcome out = stream_layers(rig, gpu, 1000, 4);
  const host::RecoveryStats rec = gpu.recovery();
  INFO(out.error << "; " << host::recovery_text(rec) << ", " << out.seconds << " s");
  for (int id : ids) CHECK(rig.emu->faults().fired(id) == 1);
  CHECK_FALSE(out.threw);
  CHECK(out.units_ok == 4000);
  CHECK(out.mismatches == 0);
  // Two retryable errors and two lost completions, each aborted and its Abort Requested retried.
  CHECK(rec.retries == 4);
  CHECK(rec.aborts == 2);
  CHECK(rec.resets == 0);
  CHECK(out.seconds < 30.0);
  WARN("long run | 4,000 layers, 8,000 reads, 4 faults | " << out.units_ok << "/" << out.units << " layers verified | "
                                                            << out.seconds << " s | " << host::recovery_text(rec));
}

namespace {

// "LBA a..b" in an error message, as GpuSubmitter / CpuSubmitter name a failed read.
bool lba_range_in(const std::string& msg, uint64_t* first, uint64_t* last) {
  const size_t at = msg.find("LBA ");
  unsigned long long a = 0, b = 0;
  if (at == std::string::npos || std::sscanf(msg.c_str() + at, "LBA %llu..%llu", &a, &b) != 2) return false;
  *first = a;
  *last = b;
  return true;
}

}  // namespace

// The engine's stop at a failed streamed layer (examples/llm gpu_executor: throw_if_failed after each
// token's logits), on the GPU: a DNR-set error armed through the fault grammar fires on one read of
// a streamed layer; the layer's consumer sees kFailed, and throw_if_failed, called once the consumer
// passed that layer, throws the clear error naming the read's LBA range (inside that layer) and the
// decoded status. No hang, no wait for any bound: well under a second.
TEST_CASE("GPU streamer: a DNR-set error on a streamed layer stops the consumer at that layer with a clear error",
          "[gpu][recovery][stream-failure]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=96M,threads=2", 2, 128, true, {}, false);
  rig.write_pattern(0, kPatternBytes, kSeed);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1, recovering());
  const uint32_t n_layers = 40;
  const std::vector<std::vector<model::Extent>> layers = small_layers(n_layers, rig.lba);
  stream::LayerStreamer s(*rig.ctrl, gpu, layers, {.slots = 2});
  // The 12th read on the first GPU queue (q=2): a few layers in, deterministic.
  const int id = rig.emu->faults().add(emu::parse_fault_spec("error:q=2:op=read:sct=2:sc=0x81:dnr=1:nth=12"));
  Streams st;
  const test::LayerSpans table = test::layer_spans(s, n_layers, rig.lba);
  const std::vector<uint32_t>& first = table.first;
  DeviceBlob d_all(table.spans.data(), table.spans.size() * sizeof(VerifySpan));
  DeviceZeros<uint64_t> bad(n_layers);
  DeviceZeros<uint32_t> seen(n_layers);
  std::string error;
  ErrorKind kind = ErrorKind::kIo;
  uint32_t stopped_at = n_layers;
  const auto t0 = Clock::now();
  s.begin(0, 0, st.s_io());
  for (uint32_t l = 0; l < n_layers && stopped_at == n_layers; ++l) {
    if (l + 1 < n_layers) s.begin(l + 1, (l + 1) % 2, st.s_io());
    const stream::SlotView v = s.wait(l % 2, st.s_compute());
    test::enqueue_verify_slot(st.s_compute(), static_cast<const uint8_t*>(v.device), d_all.as<VerifySpan>() + first[l],
                              first[l + 1] - first[l], kSeed, 0, v.status, bad.p + l, seen.p + l);
    s.release(l % 2, st.s_compute());
    // As the engine does once a token's logits are on the host: the consumer passed this layer.
    REQUIRE(cudaStreamSynchronize(static_cast<cudaStream_t>(st.s_compute())) == cudaSuccess);
    try {
      s.throw_if_failed();
    } catch (const Error& e) {
      error = e.what();
      kind = e.kind();
      stopped_at = l;
    }
  }
  const double secs = seconds_since(t0);
  try {
    s.sync();  // the load begun ahead of the failed layer ends normally; nothing hangs
  } catch (const Error& e) {
    FAIL("sync after the failure threw: " << e.what());
  }
  INFO(error << "; stopped at layer " << stopped_at << " after " << secs << " s");
  CHECK(rig.emu->faults().fired(id) == 1);
  REQUIRE(stopped_at < n_layers);
  CHECK(kind == ErrorKind::kCommandFailed);
  CHECK(error.find("Unrecovered Read Error") != std::string::npos);
  CHECK(error.find("DNR") != std::string::npos);
  // The consumer saw kFailed on exactly the layer the streamer stopped at; earlier layers verified.
  const std::vector<uint32_t> states = seen.get();
  const std::vector<uint64_t> mism = bad.get();
  for (uint32_t l = 0; l <= stopped_at; ++l) {
    INFO("layer " << l);
    CHECK(states[l] == (l == stopped_at ? stream::ticket_state::kFailed : stream::ticket_state::kOk));
    if (l < stopped_at) CHECK(mism[l] == 0);
  }
  // The LBA range named is one of that layer's reads (its extents' span: the plan may merge them).
  uint64_t lo = 0, hi = 0;
  REQUIRE(lba_range_in(error, &lo, &hi));
  uint64_t span_lo = ~0ull, span_end = 0;
  for (const model::Extent& e : layers[stopped_at]) {
    span_lo = std::min<uint64_t>(span_lo, e.first_lba);
    span_end = std::max<uint64_t>(span_end, e.first_lba + e.lba_count);
  }
  CHECK(lo <= hi);
  CHECK(lo >= span_lo);
  CHECK(hi < span_end);
  CHECK(gpu.recovery().retries == 0);  // DNR: never retried
  CHECK(gpu.recovery().resets == 0);
  CHECK(secs < 2.0);
}
