// nvme_perf: block I/O throughput and latency, like spdk_nvme_perf / fio, on any gpunvme device.
//   --path cpu: one host thread per I/O queue pair keeps --qd commands in flight (host::CpuIo).
//   --path gpu: one GPU warp per queue pair (device::warp_pump, bench/nvme_perf_gpu.cu).
// --device may be given up to 4 times: the same workload runs on every device at once, with results
// per device and in total. Latencies go into the same log-bucketed histogram on both paths.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/nvme_perf.h"
#include "host/cpu_clock.h"
#include "host/cpu_io.h"
#include "host/emulator/config.h"
#include "host/error.h"
#include "host/locked_open.h"
#include "host/open_device.h"
#include "host/text/escape.h"
#include "host/text/numbers.h"
#include "runtime/cli/args.h"
#include "runtime/cli/tool_main.h"
#include "runtime/guard/write_guard.h"
#include "runtime/io/cpu_block_io.h"

using namespace gpunvme;
using perf::DeviceResult;
using perf::Job;
using Clock = std::chrono::steady_clock;

#if !GPUNVME_HAVE_CUDA
namespace gpunvme::perf {
bool gpu_path_built() { return false; }
bool gpu_path_usable(std::string* why) {
  if (why) *why = "this build has no CUDA (configure with -Dcuda=enabled on a machine with nvcc)";
  return false;
}
void gpu_init() {
  throw Error(ErrorKind::kUnsupported,
              "--path gpu: this build has no CUDA (configure with -Dcuda=enabled on a machine with nvcc)");
}
std::vector<DeviceResult> run_gpu(const std::vector<GpuDevice>&, const Job&, const std::function<void()>&,
                                  const std::function<void()>&) {
  gpu_init();
  return {};
}
}  // namespace gpunvme::perf
#endif

namespace {

const cli::Help kHelp = {
    "usage: nvme_perf [options]\n"
    "\n"
    "IOPS, bandwidth, latency percentiles and CPU time of NVMe I/O through gpunvme's queue pairs, issued\n"
    "by host threads (--path cpu: a thread per queue) or by the GPU (--path gpu: a warp per queue).\n"
    "\n"
    "  --device DEV      device string (default emu:ram,size=1G); repeat for up to 4 devices, which all\n"
    "                    run the same workload at once (same LBA size needed; span = the smallest)\n"
    "  --path P          cpu | gpu (default cpu; gpu needs a CUDA build and a GPU)\n"
    "  --bs SIZE         bytes per command, e.g. 4K, 128K (default 128K)\n"
    "  --qd N            commands in flight per queue (default 32)\n"
    "  --queues N        I/O queue pairs per device (default 1): host threads or GPU warps\n"
    "  --rw MODE         read | write | randread | randwrite | rw | randrw (default read);\n"
    "                    rw/randrw mix reads and writes, sequential/random\n"
    "  --time SEC        run for SEC seconds, decimals allowed (default 3)\n"
    "  --verify          check the stamp of the first and last block of every read (implies --fill;\n"
    "                    writes stamp their blocks); mismatches are errors. Slows the GPU path.\n"
    "  --json            print one JSON object (one line) instead of the table\n"
    "\n"
    "e.g. nvme_perf --device emu:ram,size=4G --bs 4K --qd 64 --queues 4 --rw randread --path gpu\n",
    "\n"
    "Other options:\n"
    "  --doorbell D      GPU path: gpu (kernels write BAR0) | cpu (kernels write a host mailbox, a CPU\n"
    "                    thread forwards) | auto (gpu where BAR0 maps into the GPU; default)\n"
    "  --mix PCT         reads as a percentage of rw / randrw commands (default 70)\n"
    "  --count N         instead of --time: N commands per device in total (split over the queues)\n"
    "  --span SIZE       bytes of the namespace to address from LBA 0 (default: all of it)\n"
    "  --seed N          random LBA / mix seed (default 1)\n"
    "  --fill            first write the span (each block starts with an LBA stamp); not measured\n"
    "  --no-fill         with --verify: skip the fill, the span was filled by an earlier --fill run\n"
    "  --timeout-ms N    CPU path: a command without completion for N ms is aborted, then the controller\n"
    "                    reset and what was in flight resubmitted (default 5000); GPU path: a queue with\n"
    "                    no completion for N ms stops with an error\n"
    "  --allow-write     permit writes (write/rw modes, --fill, --verify) on a real device: vfio:, or\n"
    "                    emu: on a block device\n"
    "  --force           ... even over a partition table or filesystem signature at LBA 0\n"
    "  --label TEXT      free text copied into the JSON (\"label\") and the table's title line\n"
    "  --gpu-check       print whether the GPU path can run here; exit 0 if so, 1 if not\n"
    "\n"
    "Latency: submission to reaped completion per successful command (CPU: steady_clock; GPU:\n"
    "%globaltimer from SQE build to reap, quantized to the timer's update period), in a histogram\n"
    "with 16 buckets per power of two of ns: percentiles are the middle of the nearest-rank bucket\n"
    "(within 3.2%). The GPU path stops issuing when --time has passed (checked every ~10 ms of\n"
    "commands) and drains what is in flight.\n"
    "\n"
    "JSON keys (stable): tool, version, label, path, doorbell (GPU path: gpu/cpu as resolved), devices[], device (first), rw, mix (read %), bs, qd,\n"
    "  queues, time_s, count, span_bytes, seed, fill, verify, seconds, ios, reads, writes, errors,\n"
    "  verify_errors, iops, gbps (10^9 B/s), lat_us{mean,p50,p99,p999,max}, cpu_seconds (process, run\n"
    "  window), controller_cpu_seconds (emulator controller threads; null when unknown),\n"
    "  host_cpu_seconds (the rest: I/O threads or the GPU path's waiting thread), per_device[] (device,\n"
    "  seconds, ios, reads, writes, errors, verify_errors, iops, gbps, lat_us, controller_cpu_seconds,\n"
    "  buffer_slots, first_error, faults, chunks, untimed, recovery), first_error, recovery{retries,\n"
    "  timeouts, aborts, resets, resubmitted, protocol_errors, failed, seconds_lost}. Totals: ios summed;\n"
    "  seconds from the first submission to the last completion on any device.\n"
    "\n"
    "Faults and recovery: errors with DNR clear are retried (5 attempts, backoff 20 us doubling to 5 ms),\n"
    "DNR set is final; see the `recovery` line / key. Inject faults with the device string, e.g.\n"
    "  --device emu:ram,size=1G,fault=error:sct=2:sc=0x81:every=5000,fault=drop:every=20000\n"
    "\n"
    "Exit status: 0 ok; 1 errors (failed commands, faults, verify mismatches; with no command completed or\n"
    "any verify mismatch nothing but the error is printed: no figures); 2 usage; 3 a GPU kernel\n"
    "stopped progressing (the process ends; a running kernel cannot be cancelled).\n"
    "\n"};

// ---------- CPU time of the emulator's controller threads ----------

struct CpuWindow {
  std::vector<std::vector<pid_t>> ctrl_threads;  // per device
  rusage ru0{}, ru1{};
  std::vector<std::vector<double>> t0;
  std::vector<double> ctrl_s;  // per device, -1 unknown
  void start() {
    t0.clear();
    for (auto& v : ctrl_threads) {
      std::vector<double> x;
      for (pid_t t : v) x.push_back(host::thread_cpu_seconds(t));
      t0.push_back(x);
    }
    getrusage(RUSAGE_SELF, &ru0);
  }
  void end() {
    getrusage(RUSAGE_SELF, &ru1);
    ctrl_s.assign(ctrl_threads.size(), 0);
    for (size_t d = 0; d < ctrl_threads.size(); ++d) {
      for (size_t k = 0; k < ctrl_threads[d].size(); ++k) {
        const double a = t0[d][k], b = host::thread_cpu_seconds(ctrl_threads[d][k]);
        if (a < 0) ctrl_s[d] = -1;
        else if (ctrl_s[d] >= 0 && b >= a) ctrl_s[d] += b - a;  // a thread that ended counts as 0
      }
    }
  }
  double process_s() const {
    auto tv = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
    return tv(ru1.ru_utime) - tv(ru0.ru_utime) + tv(ru1.ru_stime) - tv(ru0.ru_stime);
  }
};

// ---------- options ----------

struct Options {
  std::vector<std::string> devices;
  std::string path = "cpu";
  std::string doorbell = "auto";  // GPU path
  uint64_t bs = 128 * 1024;
  uint32_t qd = 32, nq = 1;
  std::string rw = "read";
  uint32_t mix = 70;
  double seconds = 3;
  uint64_t count = 0;
  uint64_t span = 0;  // 0: whole namespace
  std::string span_text;  // as given, for messages
  uint64_t seed = 1;
  bool fill = false, verify = false, json = false;
  guard::WritePermission permission;
  uint64_t timeout_ms = 5000;
  std::string label;
  uint32_t read_pct = 100;
  bool writes = false;
};

uint32_t read_pct_of(const Options& o) {
  if (o.rw == "read" || o.rw == "randread") return 100;
  if (o.rw == "write" || o.rw == "randwrite") return 0;
  return o.mix;
}

// ---------- a device, opened ----------

struct Dev {
  std::string name;
  host::LockedController ctrl;  // under the device's lock: exclusive when this run writes, else shared
  host::NamespaceInfo ns;
  std::vector<std::unique_ptr<host::QueuePair>> qps;
};

using text::size_text;

// The write guard's signature check at LBA 0, through a queue pair opened for it (QID 1, before the
// measured queues exist).
void check_before_writes(Dev& d, const guard::WritePermission& permission) {
  auto qp = d.ctrl->create_io_queue_pair(1, std::min<uint32_t>(d.ctrl->max_queue_entries(), 64));
  {
    const model::BlockIo io = model::cpu_block_io(*d.ctrl, *qp, d.ns.nsid, d.name);
    guard::check_no_signatures(io, 0, permission);
  }
  d.ctrl->delete_io_queue_pair(*qp);
}

// Writes the first span_blocks of the namespace with stamped blocks through an extra CPU queue. Returns
// what its recovery did: faults during the fill count in the run's recovery numbers like any other.
host::RecoveryStats fill_span(Dev& d, uint16_t qid, uint64_t span_blocks, bool quiet) {
  host::RecoveryStats recovery;
  auto qp = d.ctrl->create_io_queue_pair(qid, std::min<uint32_t>(d.ctrl->max_queue_entries(), 64));
  {
    host::CpuIoOptions o;
    o.queue_depth = 32;
    o.max_command_bytes = 1ull << 20;
    host::CpuIo io(*d.ctrl, *qp, d.ns.nsid, o);
    const uint32_t lba = d.ns.lba_bytes;
    host::DmaBuffer buf(d.ctrl->transport(), 8ull << 20);
    std::memset(buf.host(), 0xA5, buf.size());
    const uint64_t per = buf.size() / lba;
    const auto t0 = Clock::now();
    if (!quiet) std::fprintf(stderr, "nvme_perf: filling %s of %s ...\n", size_text(span_blocks * lba).c_str(), d.name.c_str());
    for (uint64_t b = 0; b < span_blocks; b += per) {
      const uint64_t n = std::min(per, span_blocks - b);
      for (uint64_t k = 0; k < n; ++k) *reinterpret_cast<uint64_t*>(buf.as<uint8_t>() + k * lba) = perf::stamp(b + k);
      io.write(b, n, buf, 0);
    }
    if (!quiet)
      std::fprintf(stderr, "nvme_perf: filled in %.2f s\n", std::chrono::duration<double>(Clock::now() - t0).count());
    recovery = io.recovery();
  }
  d.ctrl->delete_io_queue_pair(*qp);
  return recovery;
}

// ---------- CPU path ----------

// One CPU queue's counts, added into its device's result (add_counts) as the devices' are into the total.
using CpuWorker = DeviceResult;

// Adds what `part` counted to `into`: commands, latencies, histogram, recovery, and its window where
// it completed anything.
void add_counts(DeviceResult& into, const DeviceResult& part) {
  into.ios += part.ios;
  into.reads += part.reads;
  into.writes += part.writes;
  into.errors += part.errors;
  into.verify_errors += part.verify_errors;
  into.lat_count += part.lat_count;
  into.lat_sum_ns += part.lat_sum_ns;
  into.lat_max_ns = std::max(into.lat_max_ns, part.lat_max_ns);
  if (part.t_end_ns) {
    into.t_start_ns = std::min(into.t_start_ns, part.t_start_ns);
    into.t_end_ns = std::max(into.t_end_ns, part.t_end_ns);
  }
  for (uint32_t b = 0; b < perf::hist::kBuckets; ++b) into.hist[b] += part.hist[b];
  into.recovery += part.recovery;
}

uint64_t ns_of(Clock::time_point t) {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

void cpu_queue(Dev& d, uint32_t q, const Job& job, std::atomic<bool>& go, std::atomic<uint32_t>& ready, bool& counted,
               CpuWorker& w) {
  host::CpuIoOptions o;
  o.queue_depth = job.qd;
  o.max_command_bytes = job.bs;
  // Per command: past the timeout it is aborted, then the controller reset (host/recovering_queue.h).
  o.timeout = std::chrono::milliseconds(std::max<uint64_t>(1, job.timeout_ns / 1000000));
  host::CpuIo io(*d.ctrl, *d.qps[q], d.ns.nsid, o);
  struct RecoveryOut {  // the counters reach the result however the loop ends
    CpuWorker& w;
    host::CpuIo& io;
    ~RecoveryOut() { w.recovery = io.recovery(); }
  } recovery_out{w, io};
  if (io.max_blocks_per_command() < job.pattern.blocks)
    throw Error(ErrorKind::kInvalidArgument, "--bs exceeds the controller's max transfer (MDTS)");
  host::DmaBuffer buf(d.ctrl->transport(), job.bs * job.qd);
  std::memset(buf.host(), 0xA5, buf.size());
  const uint32_t entries = d.qps[q]->entries();
  std::vector<Clock::time_point> started(entries);
  std::vector<uint32_t> slot_of(entries);
  std::vector<uint64_t> lba_of(entries);
  std::vector<uint8_t> read_of(entries);
  std::vector<uint32_t> free_slots;
  for (uint32_t i = 0; i < job.qd; ++i) free_slots.push_back(job.qd - 1 - i);
  host::Completion done[64];
  const uint32_t blocks = job.pattern.blocks, lba_bytes = job.lba_bytes;
  auto slot_ptr = [&](uint32_t s) { return buf.as<uint8_t>() + uint64_t(s) * job.bs; };
  const auto recovery_bound = (o.timeout + o.abort_timeout) * (o.retry.max_attempts + 1) + std::chrono::seconds(10);
  counted = true;
  ++ready;
  while (!go.load()) std::this_thread::yield();
  const auto t_begin = Clock::now();
  const auto deadline = t_begin + std::chrono::duration<double>(job.seconds);
  w.t_start_ns = ns_of(t_begin);
  uint64_t issued = 0;
  uint32_t in_flight = 0;
  auto last_progress = t_begin;
  for (;;) {
    const bool more = job.per_queue_count ? issued < job.per_queue_count : Clock::now() < deadline;
    bool rang = false;
    while (more && in_flight < job.qd && (!job.per_queue_count || issued < job.per_queue_count)) {
      const uint64_t lba = job.pattern.lba(q, issued);
      const bool rd = job.pattern.is_read(q, issued);
      const uint32_t s = free_slots.back();
      free_slots.pop_back();
      if (!rd && job.verify)
        for (uint32_t k = 0; k < blocks; ++k)
          *reinterpret_cast<uint64_t*>(slot_ptr(s) + uint64_t(k) * lba_bytes) = perf::stamp(lba + k);
      const auto t = Clock::now();
      const uint16_t cid = io.submit(
          host::IoRequest{rd ? nvme::nvm_op::kRead : nvme::nvm_op::kWrite, lba, blocks, &buf, uint64_t(s) * job.bs}, false);
      started[cid] = t;
      slot_of[cid] = s;
      lba_of[cid] = lba;
      read_of[cid] = rd;
      if (rd) ++w.reads; else ++w.writes;
      ++issued;
      ++in_flight;
      rang = true;
    }
    if (rang) io.ring();
    if (in_flight == 0 && !more) break;
    const uint32_t n = io.reap(done, 64);
    const auto now = Clock::now();
    if (n == 0) {
      // CpuIo bounds every command (attempts x (timeout + abort + reset)); this only catches a bug there.
      if (in_flight > 0 && now - last_progress > recovery_bound)
        throw Error(ErrorKind::kTimeout, "no completion for " +
                                             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(recovery_bound).count()) +
                                             " ms (recovery included) with " + std::to_string(in_flight) +
                                             " commands in flight on queue " + std::to_string(d.qps[q]->qid()));
      continue;
    }
    last_progress = now;
    w.t_end_ns = ns_of(now);
    for (uint32_t i = 0; i < n; ++i) {
      const uint16_t cid = done[i].cid;
      --in_flight;
      free_slots.push_back(slot_of[cid]);
      if (!done[i].ok()) {
        ++w.errors;
        if (w.first_error.empty())
          w.first_error = nvme::describe(done[i].status) + " on queue " + std::to_string(d.qps[q]->qid()) + ", LBA " +
                    std::to_string(lba_of[cid]);
        continue;
      }
      ++w.ios;
      const uint64_t lat = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(now - started[cid]).count());
      ++w.hist[perf::hist::bucket(lat)];
      ++w.lat_count;
      w.lat_sum_ns += lat;
      w.lat_max_ns = std::max(w.lat_max_ns, lat);
      if (job.verify && read_of[cid]) {
        const uint8_t* p = slot_ptr(slot_of[cid]);
        const uint64_t lba = lba_of[cid];
        const uint64_t first = *reinterpret_cast<const uint64_t*>(p);
        const uint64_t last = *reinterpret_cast<const uint64_t*>(p + uint64_t(blocks - 1) * lba_bytes);
        const bool ok_first = first == perf::stamp(lba), ok_last = last == perf::stamp(lba + blocks - 1);
        if (!ok_first || !ok_last) {
          if (w.verify_errors == 0) {
            char b[160];
            std::snprintf(b, sizeof b, "queue %u: LBA %llu read 0x%016llx, expected 0x%016llx", d.qps[q]->qid(),
                          (unsigned long long)(ok_first ? lba + blocks - 1 : lba),
                          (unsigned long long)(ok_first ? last : first),
                          (unsigned long long)perf::stamp(ok_first ? lba + blocks - 1 : lba));
            w.first_verify_error = b;
          }
          ++w.verify_errors;
        }
      }
    }
  }
}

std::vector<DeviceResult> run_cpu(std::vector<Dev>& devs, const Job& job, CpuWindow& window) {
  const uint32_t nq = job.pattern.queues;
  std::vector<std::vector<CpuWorker>> workers(devs.size(), std::vector<CpuWorker>(nq));
  std::atomic<bool> go{false};
  std::atomic<uint32_t> ready{0};
  std::vector<std::thread> threads;
  for (size_t d = 0; d < devs.size(); ++d)
    for (uint32_t q = 0; q < nq; ++q)
      threads.emplace_back([&, d, q] {
        CpuWorker& w = workers[d][q];
        bool counted = false;
        try {
          cpu_queue(devs[d], q, job, go, ready, counted, w);
        } catch (const std::exception& e) {
          if (w.first_error.empty()) w.first_error = e.what();
          ++w.errors;
        }
        if (!counted) ++ready;
      });
  // The window opens once every worker has set up (CpuIo, buffers) or failed.
  while (ready.load() < threads.size()) std::this_thread::sleep_for(std::chrono::microseconds(200));
  window.start();
  go = true;
  for (auto& t : threads) t.join();
  window.end();
  std::vector<DeviceResult> out;
  for (size_t d = 0; d < devs.size(); ++d) {
    DeviceResult r;
    r.device = devs[d].name;
    r.t_start_ns = ~0ull;
    r.buffer_slots = job.qd;
    for (const CpuWorker& w : workers[d]) {
      add_counts(r, w);
      if (r.first_error.empty()) r.first_error = w.first_error;
      if (r.first_verify_error.empty()) r.first_verify_error = w.first_verify_error;
    }
    if (r.t_start_ns == ~0ull) r.t_start_ns = 0;
    r.bytes = r.ios * job.bs;
    out.push_back(std::move(r));
  }
  return out;
}

// ---------- output ----------

struct Summary {
  double seconds = 0, iops = 0, gbps = 0;
  double mean = 0, p50 = 0, p99 = 0, p999 = 0, max = 0;  // µs
};

Summary summarize(const DeviceResult& r) {
  Summary s;
  s.seconds = r.seconds();
  if (s.seconds > 0) {
    s.iops = double(r.ios) / s.seconds;
    s.gbps = double(r.bytes) / s.seconds / 1e9;
  }
  s.mean = r.lat_count ? double(r.lat_sum_ns) / double(r.lat_count) / 1e3 : 0;
  s.p50 = perf::hist::percentile_ns(r.hist.data(), 0.50) / 1e3;
  s.p99 = perf::hist::percentile_ns(r.hist.data(), 0.99) / 1e3;
  s.p999 = perf::hist::percentile_ns(r.hist.data(), 0.999) / 1e3;
  s.max = double(r.lat_max_ns) / 1e3;
  // A bucket's middle can lie above the largest sample: never report a percentile above the max.
  if (r.lat_count) {
    s.p50 = std::min(s.p50, s.max);
    s.p99 = std::min(s.p99, s.max);
    s.p999 = std::min(s.p999, s.max);
  }
  return s;
}

DeviceResult total_of(const std::vector<DeviceResult>& rs) {
  DeviceResult t;
  t.device = "total";
  t.t_start_ns = ~0ull;
  t.controller_cpu_s = 0;
  for (const DeviceResult& r : rs) {
    add_counts(t, r);
    t.bytes += r.bytes;
    if (t.first_error.empty() && !r.first_error.empty()) t.first_error = r.device + ": " + r.first_error;
    if (t.first_verify_error.empty() && !r.first_verify_error.empty())
      t.first_verify_error = r.device + ": " + r.first_verify_error;
    if (r.controller_cpu_s < 0 || t.controller_cpu_s < 0) t.controller_cpu_s = -1;
    else t.controller_cpu_s += r.controller_cpu_s;
    t.chunks += r.chunks;
  }
  if (t.t_start_ns == ~0ull) t.t_start_ns = 0;
  return t;
}

using text::json_string;

std::string num(double v, int prec) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}
std::string u64(uint64_t v) { return std::to_string(v); }
std::string cpu_or_null(double v) { return v < 0 ? "null" : num(v, 3); }

std::string lat_json(const Summary& s) {
  return "{\"mean\":" + num(s.mean, 2) + ",\"p50\":" + num(s.p50, 2) + ",\"p99\":" + num(s.p99, 2) +
         ",\"p999\":" + num(s.p999, 2) + ",\"max\":" + num(s.max, 2) + "}";
}

// ---------- the run ----------


// The options, every refusal that needs no device included.
Options parse(const cli::Args& args) {
  Options o;
  o.devices = args.all("device");
  if (o.devices.empty()) o.devices.push_back("emu:ram,size=1G");
  if (o.devices.size() > 4) throw cli::UsageError("--device: at most 4 devices (got " + std::to_string(o.devices.size()) + ")");
  o.path = args.get("path", "cpu");
  o.doorbell = args.get("doorbell", "auto");
  o.bs = args.get_size("bs", 128 * 1024);
  o.qd = uint32_t(std::min<uint64_t>(args.get_u64("qd", 32), 1u << 20));
  o.nq = uint32_t(std::min<uint64_t>(args.get_u64("queues", 1), 1u << 16));
  o.rw = args.get("rw", "read");
  o.mix = uint32_t(std::min<uint64_t>(args.get_u64("mix", 70), 1000));
  o.seconds = args.get_double("time", 3.0);
  if (o.seconds <= 0 || o.seconds > 1e6) throw cli::UsageError("--time: '" + args.get("time") + "' is not 0 < seconds <= 1000000");
  o.count = args.get_u64("count", 0);
  o.span = args.get_size("span", 0);
  o.span_text = args.get("span");
  o.seed = args.get_u64("seed", 1);
  o.timeout_ms = args.get_u64("timeout-ms", 5000);
  o.verify = args.has("verify");
  o.fill = args.has("fill") || (o.verify && !args.has("no-fill"));
  if (args.has("no-fill") && (args.has("fill") || !o.verify)) throw cli::UsageError("--no-fill goes with --verify, without --fill");
  o.permission = {args.has("allow-write"), args.has("force")};
  o.json = args.has("json");
  o.label = args.get("label", "");
  if (o.path != "cpu" && o.path != "gpu") throw cli::UsageError("--path must be cpu or gpu");
  if (!device::parse_doorbell_mode(o.doorbell)) throw cli::UsageError("--doorbell must be auto, gpu or cpu");
  if (args.has("doorbell") && o.path != "gpu") throw cli::UsageError("--doorbell goes with --path gpu");
  if (o.rw != "read" && o.rw != "write" && o.rw != "randread" && o.rw != "randwrite" && o.rw != "rw" && o.rw != "randrw")
    throw cli::UsageError("--rw must be read, write, randread, randwrite, rw or randrw");
  if (o.mix > 100) throw cli::UsageError("--mix is a percentage: 0..100");
  if (o.qd == 0 || o.nq == 0) throw cli::UsageError("--qd and --queues must be at least 1");
  if (o.bs == 0 || o.bs % 512) throw cli::UsageError("--bs must be a positive multiple of 512");
  if (o.timeout_ms == 0 || o.timeout_ms > 3600000) throw cli::UsageError("--timeout-ms must be 1..3600000");
  o.read_pct = read_pct_of(o);
  // Options that would change nothing, or be cut down, are refused rather than ignored.
  if (args.has("mix") && o.rw != "rw" && o.rw != "randrw")
    throw cli::UsageError("--mix applies to --rw rw or randrw; --rw " + o.rw + " issues only " +
                          (o.read_pct == 100 ? "reads" : "writes"));
  if (args.has("count") && args.has("time")) throw cli::UsageError("--count and --time both say when to stop: give one");
  if (args.has("count") && o.count == 0) throw cli::UsageError("--count must be at least 1");
  if (o.verify && o.read_pct == 0) throw cli::UsageError("--verify checks what reads return; --rw " + o.rw + " issues none");
  o.writes = o.read_pct < 100 || o.fill;
  for (const std::string& d : o.devices) {
    if (o.verify && emu::is_emu_device(d) && emu::parse_emu_device(d).namespaces.at(0).backing == emu::Backing::kNull)
      throw cli::UsageError(d + ": --verify needs a device that stores data; emu:null keeps none (use emu:ram)");
    if (o.writes)
      guard::check_write_allowed(d, o.permission,
                                 "this run writes (--rw " + o.rw + (o.fill ? ", --fill/--verify" : "") + ") over its blocks");
  }
  return o;
}

// Opens every device, noting the threads that appear meanwhile (the emulator's controller threads).
std::vector<Dev> open_devices(const Options& o, CpuWindow& window) {
  std::vector<Dev> devs(o.devices.size());
  const uint32_t extra = o.fill ? 1 : 0;
  for (size_t k = 0; k < o.devices.size(); ++k) {
    Dev& d = devs[k];
    d.name = o.devices[k];
    host::ControllerOptions copts;
    copts.io_queues_wanted = o.nq + extra;
    window.ctrl_threads.push_back(host::threads_started_by([&] { d.ctrl = host::open_for(o.writes, d.name, copts); }));
    d.ns = d.ctrl->namespaces().at(0);
    if (o.nq + extra > d.ctrl->io_queues_granted())
      throw cli::UsageError(d.name + ": --queues " + std::to_string(o.nq) + (extra ? " (+1 to fill)" : "") +
                            ": the controller granted only " + std::to_string(d.ctrl->io_queues_granted()));
  }
  return devs;
}

// The workload over the devices opened, refusing what they cannot do (block size, MDTS, span, depth).
Job make_job(const Options& o, const std::vector<Dev>& devs) {
  const uint32_t lba_bytes = devs[0].ns.lba_bytes;
  uint64_t span_blocks = ~0ull;
  for (const Dev& d : devs) {
    if (d.ns.lba_bytes != lba_bytes)
      throw cli::UsageError("--device: all devices need the same LBA size (" + devs[0].name + ": " +
                            std::to_string(lba_bytes) + ", " + d.name + ": " + std::to_string(d.ns.lba_bytes) + ")");
    span_blocks = std::min(span_blocks, d.ns.blocks);
    const uint64_t max_bytes = uint64_t(d.ctrl->max_blocks_per_command(d.ns.nsid)) * lba_bytes;
    if (o.bs > max_bytes)
      throw cli::UsageError(d.name + ": --bs " + size_text(o.bs) + " is more than one command can move (" +
                            size_text(max_bytes) + ", MDTS" +
                            (emu::is_emu_device(d.name) ? "; for emu: add mdts=9 for 2M or mdts=0 for no limit)" : ")"));
  }
  if (o.bs % lba_bytes) throw cli::UsageError("--bs must be a multiple of the " + std::to_string(lba_bytes) + "-byte block");
  if (o.span > span_blocks * lba_bytes)
    throw cli::UsageError("--span " + o.span_text + " is more than the namespace holds (" +
                          size_text(span_blocks * lba_bytes) + (devs.size() > 1 ? ", the smallest device's)" : ")"));
  if (o.span) span_blocks = o.span / lba_bytes;
  const uint32_t blocks = uint32_t(o.bs / lba_bytes);
  if (span_blocks < blocks) throw cli::UsageError("--span is smaller than one command of --bs");

  for (const Dev& d : devs)
    if (o.qd + 1 > d.ctrl->max_queue_entries())
      throw cli::UsageError(d.name + ": --qd " + std::to_string(o.qd) + " needs " + std::to_string(o.qd + 1) +
                            "-entry queues; the controller allows " + std::to_string(d.ctrl->max_queue_entries()));

  Job job;
  job.pattern.first_lba = 0;
  job.pattern.blocks = blocks;
  job.pattern.slots = span_blocks / blocks;
  job.pattern.queues = o.nq;
  job.pattern.read_pct = o.read_pct;
  job.pattern.random = o.rw.rfind("rand", 0) == 0 ? 1 : 0;
  job.pattern.seed = o.seed;
  job.bs = o.bs;
  job.lba_bytes = lba_bytes;
  job.qd = o.qd;
  job.seconds = o.seconds;
  job.per_queue_count = o.count ? (o.count + o.nq - 1) / o.nq : 0;
  job.timeout_ns = o.timeout_ms * 1000000ull;
  job.verify = o.verify;
  job.doorbell = *device::parse_doorbell_mode(o.doorbell);
  return job;
}

// The signature check and --fill, the measured queues, the run on the path asked for; per device.
std::vector<DeviceResult> run_job(const Options& o, std::vector<Dev>& devs, const Job& job, CpuWindow& window) {
  const bool gpu = o.path == "gpu";
  if (o.writes)
    for (Dev& d : devs) check_before_writes(d, o.permission);
  std::vector<host::RecoveryStats> fill_recovery;  // per device, added to its measured run's
  if (o.fill)
    for (Dev& d : devs) fill_recovery.push_back(fill_span(d, uint16_t(o.nq + 1), job.pattern.slots * job.pattern.blocks, o.json));

  host::DmaOptions gm;
  gm.gpu_mapped = gpu;
  for (Dev& d : devs) {
    const uint32_t entries = std::min<uint32_t>(d.ctrl->max_queue_entries(), std::max<uint32_t>(o.qd + 1, 64));
    for (uint32_t q = 0; q < o.nq; ++q)
      d.qps.push_back(gpu ? d.ctrl->create_io_queue_pair(uint16_t(q + 1), entries, gm)
                          : d.ctrl->create_io_queue_pair(uint16_t(q + 1), entries));
  }

  std::vector<DeviceResult> results;
  if (gpu) {
    std::vector<perf::GpuDevice> gd;
    for (Dev& d : devs) {
      perf::GpuDevice g;
      g.name = d.name;
      g.controller = d.ctrl.get();
      g.nsid = d.ns.nsid;
      for (auto& qp : d.qps) g.queues.push_back(qp.get());
      gd.push_back(std::move(g));
    }
    results = perf::run_gpu(gd, job, [&] { window.start(); }, [&] { window.end(); });
  } else {
    results = run_cpu(devs, job, window);
  }
  for (size_t k = 0; k < results.size(); ++k) results[k].controller_cpu_s = window.ctrl_s.at(k);
  for (size_t k = 0; k < fill_recovery.size(); ++k) results.at(k).recovery += fill_recovery[k];
  if (!gpu)
    for (Dev& d : devs)
      for (auto& qp : d.qps) d.ctrl->delete_io_queue_pair(*qp);
  return results;
}

// What the report prints: the totals and the CPU time split.
struct Report {
  DeviceResult total;
  Summary ts;
  double cpu_s = 0, ctrl_s = 0, host_s = 0;
  std::string first_error;
};

std::string report_json(const Options& o, const std::vector<Dev>& devs, const Job& job,
                        const std::vector<DeviceResult>& results, const Report& rep) {
  const bool gpu = o.path == "gpu";
  const uint32_t read_pct = o.read_pct;
  const DeviceResult& total = rep.total;
  const Summary& ts = rep.ts;
  const double cpu_s = rep.cpu_s, ctrl_s = rep.ctrl_s, host_s = rep.host_s;
  const std::string& first_error = rep.first_error;
  std::string j = "{\"tool\":\"nvme_perf\",\"version\":2,\"label\":" +
                  (o.label.empty() ? std::string("null") : json_string(o.label)) + ",\"path\":" + json_string(o.path) +
                  ",\"doorbell\":" + (gpu ? json_string(results[0].doorbell) : std::string("null")) +
                  ",\"devices\":[";
  for (size_t k = 0; k < devs.size(); ++k) j += (k ? "," : "") + json_string(devs[k].name);
  j += "],\"device\":" + json_string(devs[0].name) + ",\"rw\":" + json_string(o.rw) + ",\"mix\":" + u64(read_pct) +
       ",\"bs\":" + u64(o.bs) + ",\"qd\":" + u64(o.qd) + ",\"queues\":" + u64(o.nq) +
       ",\"time_s\":" + (o.count ? std::string("null") : num(o.seconds, 3)) + ",\"count\":" + u64(o.count) +
       ",\"span_bytes\":" + u64(job.pattern.slots * o.bs) + ",\"seed\":" + u64(o.seed) +
       ",\"fill\":" + (o.fill ? "true" : "false") + ",\"verify\":" + (o.verify ? "true" : "false") +
       ",\"seconds\":" + num(ts.seconds, 4) + ",\"ios\":" + u64(total.ios) + ",\"reads\":" + u64(total.reads) +
       ",\"writes\":" + u64(total.writes) + ",\"errors\":" + u64(total.errors) +
       ",\"verify_errors\":" + u64(total.verify_errors) + ",\"iops\":" + num(ts.iops, 1) +
       ",\"gbps\":" + num(ts.gbps, 4) + ",\"lat_us\":" + lat_json(ts) + ",\"cpu_seconds\":" + num(cpu_s, 3) +
       ",\"controller_cpu_seconds\":" + cpu_or_null(ctrl_s) + ",\"host_cpu_seconds\":" + cpu_or_null(host_s) +
       ",\"recovery\":" + host::recovery_json(total.recovery) + ",\"per_device\":[";
  for (size_t k = 0; k < results.size(); ++k) {
    const DeviceResult& r = results[k];
    const Summary s = summarize(r);
    j += std::string(k ? "," : "") + "{\"device\":" + json_string(r.device) + ",\"seconds\":" + num(s.seconds, 4) +
         ",\"ios\":" + u64(r.ios) + ",\"reads\":" + u64(r.reads) + ",\"writes\":" + u64(r.writes) +
         ",\"errors\":" + u64(r.errors) + ",\"verify_errors\":" + u64(r.verify_errors) + ",\"iops\":" + num(s.iops, 1) +
         ",\"gbps\":" + num(s.gbps, 4) + ",\"lat_us\":" + lat_json(s) +
         ",\"controller_cpu_seconds\":" + cpu_or_null(r.controller_cpu_s) + ",\"buffer_slots\":" + u64(r.buffer_slots) +
         ",\"first_error\":" + (r.first_error.empty() ? (r.first_verify_error.empty() ? "null" : json_string(r.first_verify_error)) : json_string(r.first_error)) +
         ",\"faults\":" + (r.faults.empty() ? "null" : json_string(r.faults)) + ",\"chunks\":" + u64(r.chunks) +
         ",\"untimed\":" + u64(r.untimed) + ",\"recovery\":" + host::recovery_json(r.recovery) + "}";
  }
  j += "],\"first_error\":" + (first_error.empty() ? std::string("null") : json_string(first_error)) + "}";
  return j;
}

void print_table(const Options& o, const std::vector<DeviceResult>& results, const Report& rep) {
  const bool gpu = o.path == "gpu";
  const uint32_t read_pct = o.read_pct;
  const DeviceResult& total = rep.total;
  const Summary& ts = rep.ts;
  const double cpu_s = rep.cpu_s, ctrl_s = rep.ctrl_s, host_s = rep.host_s;
  if (!o.label.empty()) std::printf("%s\n", text::printable(o.label).c_str());
  std::printf("nvme_perf  path %s  rw %s (%u%% reads)  bs %s  qd %u  queues %u  %s%s%s\n", o.path.c_str(), o.rw.c_str(),
              read_pct, size_text(o.bs).c_str(), o.qd, o.nq,
              o.count ? ("count " + u64(o.count)).c_str() : ("time " + num(o.seconds, 2) + " s").c_str(),
              o.fill ? "  filled" : "", o.verify ? "  verified" : "");
  if (gpu)
    for (const DeviceResult& r : results) std::printf("  %s: %s\n", r.device.c_str(), r.doorbell_note.c_str());
  const int wdev = 34;
  std::printf("  %-*s %12s %12s %9s %9s %9s %9s %9s %9s %7s\n", wdev, "device", "ios", "IOPS", "GB/s", "mean us",
              "p50 us", "p99 us", "p99.9 us", "max us", "errors");
  auto row = [&](const DeviceResult& r) {
    const Summary s = summarize(r);
    std::string name = text::printable(r.device);
    if (int(name.size()) > wdev) name = name.substr(0, wdev - 3) + "...";
    std::printf("  %-*s %12llu %12.0f %9.3f %9.1f %9.1f %9.1f %9.1f %9.1f %7llu\n", wdev, name.c_str(),
                (unsigned long long)r.ios, s.iops, s.gbps, s.mean, s.p50, s.p99, s.p999, s.max,
                (unsigned long long)(r.errors + r.verify_errors));
  };
  for (const DeviceResult& r : results) row(r);
  if (results.size() > 1) row(total);
  std::printf("  CPU time %.2f s over %.2f s: ", cpu_s, ts.seconds);
  if (ctrl_s >= 0)
    std::printf("%.2f s emulator controller threads, %.2f s the rest (%s)\n", ctrl_s, host_s,
                gpu ? "host waiting on the GPU, CUDA runtime" : "host I/O threads");
  else
    std::printf("process total (controller threads not separable)\n");
  std::printf("  recovery: %s\n", host::recovery_text(total.recovery).c_str());
  for (const DeviceResult& r : results) {
    if (!r.first_error.empty()) std::printf("  %s: first error: %s\n", text::printable(r.device).c_str(), r.first_error.c_str());
    if (!r.faults.empty()) std::printf("  %s: queue faults: %s\n", text::printable(r.device).c_str(), r.faults.c_str());
    if (r.untimed)
      std::printf("  %s: %llu completions had no visible submit time (left out of the latencies)\n", text::printable(r.device).c_str(),
                  (unsigned long long)r.untimed);
    if (r.verify_errors)
      std::printf("  %s: %llu verify mismatches; first: %s\n", text::printable(r.device).c_str(), (unsigned long long)r.verify_errors,
                  r.first_verify_error.c_str());
  }
}

int run(int argc, char** argv) {
  cli::Args args(argc, argv, 1,
                 {"device", "path", "doorbell", "bs", "qd", "queues", "rw", "mix", "time", "count", "span", "seed",
                  "timeout-ms", "label"},
                 {"json", "help", "fill", "verify", "no-fill", "allow-write", "force", "gpu-check"}, {"device"});
  if (!args.positional().empty()) throw cli::UsageError("unexpected argument '" + args.positional()[0] + "'");
  if (args.help_asked()) return args.print_help("nvme_perf", {kHelp.brief, kHelp.rest + host::device_string_help()});
  if (args.has("gpu-check")) {
    std::string why;
    const bool ok = perf::gpu_path_usable(&why);
    std::printf("nvme_perf: GPU path %s%s\n", ok ? "usable" : "not usable: ", ok ? "" : why.c_str());
    return ok ? 0 : 1;
  }
  const Options o = parse(args);
  if (o.path == "gpu") perf::gpu_init();  // before the devices open: CUDA's own threads are not controller threads
  CpuWindow window;
  std::vector<Dev> devs = open_devices(o, window);
  const Job job = make_job(o, devs);
  const std::vector<DeviceResult> results = run_job(o, devs, job, window);

  Report rep;
  rep.total = total_of(results);
  rep.ts = summarize(rep.total);
  rep.cpu_s = window.process_s();
  rep.ctrl_s = rep.total.controller_cpu_s;
  rep.host_s = rep.ctrl_s < 0 ? -1 : std::max(0.0, rep.cpu_s - rep.ctrl_s);
  const DeviceResult& total = rep.total;
  const bool failed = total.errors != 0 || total.verify_errors != 0 || total.ios == 0 ||
                      std::any_of(results.begin(), results.end(), [](const DeviceResult& r) { return !r.faults.empty(); });
  rep.first_error = total.first_error.empty() ? total.first_verify_error : total.first_error;
  if (rep.first_error.empty() && total.ios == 0) rep.first_error = "no command completed";
  // No figure from a run whose commands never completed or whose bytes did not verify.
  if (total.ios == 0 || total.verify_errors != 0) {
    std::string why = total.ios == 0 ? rep.first_error : "";
    if (total.verify_errors)
      why += (why.empty() ? "" : "; ") + u64(total.verify_errors) + " reads did not verify, first: " +
             total.first_verify_error;
    std::fprintf(stderr, "nvme_perf: error: %s; no figures printed\n", why.c_str());
    return 1;
  }
  if (o.json) std::printf("%s\n", report_json(o, devs, job, results, rep).c_str());
  else print_table(o, results, rep);
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return cli::run_tool("nvme_perf", kHelp, [&] { return run(argc, argv); }); }
