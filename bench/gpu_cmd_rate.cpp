// gpu_cmd_rate: GPU-initiated vs CPU-initiated NVMe command rate and read bandwidth on the emulator.
//
//  1. Null namespace, 4 KiB reads: commands/s at 1, 4, 16, 64 queues (a warp per queue on the GPU;
//     min(queues, 8) host threads on the CPU path), `--threads` controller threads.
//  2. RAM namespace, 4 KiB and 128 KiB reads at `--ram-queues` queues: GB/s of both paths, next to
//     the memcpy bandwidth that the same number of threads (as the controller threads) achieves.
// With --probe FILE (the output of shared/calibration/warp_queue_probe run in the same session), each
// null row also shows the probe's best rate at that queue count and the ratio.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/gpu_cmd_rate_kernel.h"
#include "device/queue_set.h"
#include "host/cpu_io.h"
#include "host/cuda_device.h"
#include "host/error.h"
#include "host/locked_open.h"
#include "host/open_device.h"
#include "host/text/numbers.h"
#include "runtime/cli/args.h"
#include "runtime/cli/tool_main.h"

using namespace gpunvme;
using Clock = std::chrono::steady_clock;

namespace {

const cli::Help kHelp = {
    "usage: gpu_cmd_rate [--threads N] [--queues 1,4,16,64] [--count N] [--ram-queues N] [--ram-size SIZE]\n"
    "                    [--entries N] [--probe FILE] [--skip-null] [--skip-ram] [--skip-cpu]\n"
    "                    [--doorbell auto|gpu|cpu]\n"
    "\n"
    "GPU-initiated against CPU-initiated NVMe commands per second (emu:null) and read bandwidth (emu:ram)\n"
    "on the emulator, a warp or a host thread per queue.\n"
    "\n"
    "  --threads N       emulator controller threads (default 8; a run uses min(N, queues))\n"
    "  --queues LIST     queue counts of the command-rate runs (default 1,4,16,64)\n"
    "  --count N         null commands per run, split over the queues (default 64M, at least 4M per queue)\n"
    "  --ram-queues N    queues for the RAM-namespace reads (default 8)\n"
    "  --ram-size SIZE   the RAM namespace's size (default 1G)\n"
    "  --entries N       queue entries (default 4096)\n"
    "  --probe FILE      the calibration probe's output (shared/calibration): prints GPU / probe\n"
    "  --skip-null       no command-rate runs; --skip-ram: no bandwidth runs; --skip-cpu: GPU path only\n"
    "  --doorbell D      GPU path doorbells: gpu (kernels write BAR0), cpu (a host thread forwards them from a\n"
    "                    mailbox the kernels write), auto (gpu where BAR0 maps into the GPU; default)\n"
    "\n"
    "A run whose commands did not all complete prints \"-\" instead of its figures, and the error.\n",
    ""};

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

host::DmaOptions gpu_memory() {
  host::DmaOptions m;
  m.gpu_mapped = true;
  return m;
}

// Best rate of the calibration probe per queue count, from its output lines
// "queues %2d ctrl-threads %d: %6.2f M cmds/s ...".
std::map<uint32_t, double> read_probe(const std::string& path) {
  std::map<uint32_t, double> best;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    unsigned q = 0, t = 0;
    double rate = 0;
    if (std::sscanf(line.c_str(), "queues %u ctrl-threads %u: %lf M cmds/s", &q, &t, &rate) == 3)
      best[q] = std::max(best[q], rate);
  }
  return best;
}

struct Rig {
  host::LockedController ctrl;  // exclusive when it fills the namespace, else shared (host/locked_open.h)
  std::vector<std::unique_ptr<host::QueuePair>> qps;
  std::unique_ptr<host::QueuePair> filler;
  // fill_bytes > 0: writes the first fill_bytes of the namespace through an extra CPU queue first, so
  // that reads copy committed memory (untouched anonymous memory would read as the shared zero page).
  Rig(const std::string& dev, uint32_t nq, uint32_t entries, bool gpu, uint64_t fill_bytes = 0) {
    host::ControllerOptions o;
    o.io_queues_wanted = nq + 1;
    ctrl = host::open_for(fill_bytes > 0, dev, o);
    for (uint32_t q = 0; q < nq; ++q)
      qps.push_back(gpu ? ctrl->create_io_queue_pair(uint16_t(q + 1), entries, gpu_memory())
                        : ctrl->create_io_queue_pair(uint16_t(q + 1), entries));
    if (fill_bytes) {
      filler = ctrl->create_io_queue_pair(uint16_t(nq + 1), 256);
      host::CpuIo io(*ctrl, *filler, 1);
      const uint32_t lba = io.lba_bytes();
      host::DmaBuffer buf(ctrl->transport(), 8 << 20);
      std::memset(buf.host(), 0xA5, buf.size());
      for (uint64_t off = 0; off < fill_bytes; off += buf.size())
        io.write(off / lba, std::min<uint64_t>(buf.size(), fill_bytes - off) / lba, buf, 0);
    }
  }
  std::vector<host::QueuePair*> raw() const {
    std::vector<host::QueuePair*> r;
    for (auto& q : qps) r.push_back(q.get());
    return r;
  }
};

struct Rate {
  double seconds = 0;
  uint64_t commands = 0;
  uint64_t bytes = 0;
  std::string error;
  std::string doorbell_note;  // GPU path: who wrote the doorbells, and why
  double mcmds() const { return seconds > 0 ? commands / seconds / 1e6 : 0; }
  double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

// GPU path: one warp per queue, `per_queue` reads of `bytes` each.
Rate gpu_reads(const std::string& dev, uint32_t nq, uint32_t entries, uint64_t per_queue, uint64_t bytes, uint32_t depth,
               uint64_t span_bytes, device::DoorbellMode doorbell) {
  Rig rig(dev, nq, entries, true, span_bytes);
  device::DeviceQueueOptions qo;
  qo.max_command_bytes = std::max<uint64_t>(bytes, 4096);
  qo.doorbell = doorbell;
  device::DeviceQueueSet set(*rig.ctrl, rig.raw(), 1, qo);
  const uint32_t slots = depth ? depth : 1;
  const bool shared = span_bytes == 0;  // null: every command may target the same page
  host::DmaBuffer dst(rig.ctrl->transport(), (shared ? 1 : nq) * uint64_t(slots) * bytes, gpu_memory());
  device::DeviceBufferMap map(dst, rig.ctrl->page_bytes());
  const uint32_t lba = set.lba_bytes();
  bench::StreamSpec s;
  s.blocks = uint32_t(bytes / lba);
  s.span_blocks = shared ? rig.ctrl->namespace_info(1).blocks : span_bytes / lba;
  s.slot_bytes = bytes;
  s.slots = slots;
  s.shared_dst = shared;
  s.depth = depth;
  s.per_queue = std::max<uint64_t>(1, per_queue / 16);  // warm-up
  bench::read_stream(set, s, map.get());
  s.per_queue = per_queue;
  const auto t0 = Clock::now();
  const bench::StreamResult r = bench::read_stream(set, s, map.get());
  Rate out;
  out.seconds = secs(t0, Clock::now());
  out.commands = r.completed - r.failed;
  out.bytes = out.commands * bytes;
  out.doorbell_note = set.doorbell_note();
  if (!r.ok()) out.error = r.describe();
  return out;
}

// CPU path: min(nq, 8) host threads, thread t drives queues t, t + threads, ... with `depth` each.
Rate cpu_reads(const std::string& dev, uint32_t nq, uint32_t entries, uint64_t per_queue, uint64_t bytes, uint32_t depth,
               uint64_t span_bytes) {
  Rig rig(dev, nq, entries, false, span_bytes);
  const uint32_t nt = std::min<uint32_t>(nq, 8);
  const uint32_t lba = rig.ctrl->namespace_info(1).lba_bytes;
  const bool shared = span_bytes == 0;
  const uint64_t span_blocks = shared ? rig.ctrl->namespace_info(1).blocks : span_bytes / lba;
  const uint32_t nb = uint32_t(bytes / lba);
  std::vector<std::string> errors(nt);
  std::atomic<uint64_t> done_total{0};
  auto run = [&](uint64_t count) {
    std::vector<std::thread> th;
    for (uint32_t t = 0; t < nt; ++t) {
      th.emplace_back([&, t] {
        try {
          struct Q {
            std::unique_ptr<host::CpuIo> io;
            std::unique_ptr<host::DmaBuffer> buf;
            uint64_t issued = 0, done = 0;
            uint32_t in_flight = 0;
            uint64_t base = 0;
          };
          std::vector<Q> qs;
          for (uint32_t q = t; q < nq; q += nt) {
            Q x;
            host::CpuIoOptions o;
            o.queue_depth = depth;
            o.max_command_bytes = std::max<uint64_t>(bytes, 4096);
            x.io = std::make_unique<host::CpuIo>(*rig.ctrl, *rig.qps[q], 1, o);
            x.buf = std::make_unique<host::DmaBuffer>(rig.ctrl->transport(), bytes * depth);
            x.base = uint64_t(q) * count;
            qs.push_back(std::move(x));
          }
          host::Completion c[64];
          bool more = true;
          while (more) {
            more = false;
            for (Q& x : qs) {
              bool rang = false;
              while (x.issued < count && x.in_flight < depth) {
                const uint64_t lba0 = ((x.base + x.issued) * nb) % (span_blocks / nb * nb);
                x.io->submit(host::IoRequest{nvme::nvm_op::kRead, lba0, nb, x.buf.get(),
                                             (x.issued % depth) * bytes},
                             false);
                ++x.issued;
                ++x.in_flight;
                rang = true;
              }
              if (rang) x.io->ring();
              const uint32_t n = x.io->reap(c, 64);
              for (uint32_t i = 0; i < n; ++i)
                if (!c[i].ok()) throw Error(ErrorKind::kCommandFailed, nvme::describe(c[i].status));
              x.in_flight -= n;
              x.done += n;
              if (x.done < count) more = true;
            }
          }
          uint64_t d = 0;
          for (Q& x : qs) d += x.done;
          done_total += d;
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
      });
    }
    for (auto& x : th) x.join();
  };
  run(std::max<uint64_t>(1, per_queue / 16));
  done_total = 0;
  const auto t0 = Clock::now();
  run(per_queue);
  Rate out;
  out.seconds = secs(t0, Clock::now());
  out.commands = done_total.load();
  out.bytes = out.commands * bytes;
  for (auto& e : errors)
    if (!e.empty()) out.error = e;
  return out;
}

// memcpy bandwidth of `threads` threads copying 128 KiB pieces from a RAM area into pinned memory.
// A figure, or "-" when its run failed (a number from a run that did not complete is no number).
std::string figure(const Rate& r, double value, const char* format) {
  if (!r.error.empty()) return "-";
  char b[32];
  std::snprintf(b, sizeof b, format, value);
  return b;
}

double memcpy_gbps(uint32_t threads, uint64_t src_bytes, uint64_t piece, double seconds) {
  std::vector<char> src(src_bytes);
  std::memset(src.data(), 0x5A, src.size());
  char* dst = nullptr;
  const uint64_t dst_per_thread = 32 * piece;
  dst = static_cast<char*>(std::aligned_alloc(4096, dst_per_thread * threads));
  std::memset(dst, 0, dst_per_thread * threads);
  std::atomic<bool> stop{false};
  std::vector<uint64_t> copied(threads * 8, 0);
  std::vector<std::thread> th;
  for (uint32_t t = 0; t < threads; ++t) {
    th.emplace_back([&, t] {
      uint64_t n = 0, i = t * 997;
      const uint64_t pieces = src_bytes / piece;
      while (!stop.load(std::memory_order_relaxed)) {
        std::memcpy(dst + t * dst_per_thread + (n % 32) * piece, src.data() + (i % pieces) * piece, piece);
        i += 7;
        ++n;
      }
      copied[t * 8] = n * piece;
    });
  }
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& x : th) x.join();
  const double s = secs(t0, Clock::now());
  uint64_t total = 0;
  for (uint32_t t = 0; t < threads; ++t) total += copied[t * 8];
  std::free(dst);
  return total / s / 1e9;
}

struct Options {
  uint32_t threads = 8;
  std::vector<uint32_t> queue_counts;
  uint64_t count = 0;
  uint32_t entries = 4096;
  uint32_t ram_queues = 8;
  uint64_t ram_size = 0;
  std::map<uint32_t, double> probe;
  device::DoorbellMode doorbell{};
  bool skip_null = false, skip_ram = false, skip_cpu = false;
};

// The null namespace's table: command rate by queue count. Returns the rows that failed.
int null_table(const Options& o) {
  int failures = 0;
  std::printf("Null namespace, 4 KiB reads, %u-entry queues: GPU = one warp per queue; CPU = min(queues, 8) host threads\n",
              o.entries);
  std::printf("%6s %5s %14s %14s %14s %10s %10s\n", "queues", "ctrl", "GPU Mcmd/s", "CPU Mcmd/s", "probe Mcmd/s",
              "GPU/probe", "GPU/CPU");
  for (uint32_t nq : o.queue_counts) {
    const uint32_t ct = std::min(o.threads, nq);
    const std::string dev = "emu:null,size=1T,queues=64,threads=" + std::to_string(ct) + ",poll=spin,ready_ms=0";
    const uint64_t per_queue = std::max<uint64_t>(o.count / nq, 4ull << 20);
    const Rate g = gpu_reads(dev, nq, o.entries, per_queue, 4096, 0, 0, o.doorbell);
    Rate c;
    if (!o.skip_cpu) c = cpu_reads(dev, nq, std::min<uint32_t>(o.entries, 1024), per_queue / 8, 4096, 256, 0);
    const double p = o.probe.count(nq) ? o.probe.at(nq) : 0;
    if (nq == o.queue_counts.front()) std::printf("  doorbells: %s\n", g.doorbell_note.c_str());
    const bool both = g.error.empty() && c.error.empty() && c.mcmds() > 0;
    std::printf("%6u %5u %14s %14s %14.1f %10s %10s\n", nq, ct, figure(g, g.mcmds(), "%.1f").c_str(),
                figure(c, c.mcmds(), "%.1f").c_str(), p,
                p > 0 && g.error.empty() ? (std::to_string(g.mcmds() / p).substr(0, 4) + "x").c_str() : "-",
                both ? figure(g, g.mcmds() / c.mcmds(), "%.2f").c_str() : "-");
    if (!g.error.empty()) std::printf("  GPU error: %s\n", g.error.c_str()), ++failures;
    if (!c.error.empty()) std::printf("  CPU error: %s\n", c.error.c_str()), ++failures;
    std::fflush(stdout);
  }
  return failures;
}

// The RAM namespace's table: bandwidth at 4 KiB and 128 KiB against memcpy. Returns the rows that failed.
int ram_table(const Options& o) {
  int failures = 0;
  const uint32_t ct = std::min(o.threads, o.ram_queues);
  const std::string dev = "emu:ram,size=" + std::to_string(o.ram_size >> 20) + "M,queues=64,threads=" +
                          std::to_string(ct) + ",poll=spin,ready_ms=0";
  std::printf("\n%s, filled through the CPU path before each run\n", dev.c_str());
  std::printf("RAM namespace reads, %u queues, %u controller threads, depth 32/queue\n", o.ram_queues, ct);
  std::printf("%8s %10s %10s %10s %10s %14s %12s\n", "size", "GPU GB/s", "GPU kIOPS", "CPU GB/s", "CPU kIOPS",
              "memcpy GB/s", "GPU/memcpy");
  const double mc = memcpy_gbps(ct, o.ram_size, 128 << 10, 1.0);
  for (uint64_t bs : {uint64_t(4096), uint64_t(128 << 10)}) {
    const uint64_t per_queue = bs == 4096 ? 400000 : 40000;
    const uint64_t span = o.ram_size;
    const Rate g = gpu_reads(dev, o.ram_queues, 256, per_queue, bs, 32, span, o.doorbell);
    Rate c;
    if (!o.skip_cpu) c = cpu_reads(dev, o.ram_queues, 256, per_queue, bs, 32, span);
    std::printf("%7lluK %10s %10s %10s %10s %14.2f %12s\n", (unsigned long long)(bs >> 10),
                figure(g, g.gbps(), "%.2f").c_str(), figure(g, g.commands / std::max(g.seconds, 1e-9) / 1e3, "%.0f").c_str(),
                figure(c, c.gbps(), "%.2f").c_str(), figure(c, c.commands / std::max(c.seconds, 1e-9) / 1e3, "%.0f").c_str(),
                mc, (figure(g, 100.0 * g.gbps() / mc, "%.0f") + (g.error.empty() ? "%" : "")).c_str());
    if (!g.error.empty()) std::printf("  GPU error: %s\n", g.error.c_str()), ++failures;
    if (!c.error.empty()) std::printf("  CPU error: %s\n", c.error.c_str()), ++failures;
    std::fflush(stdout);
  }
  return failures;
}

Options parse(const cli::Args& args) {
  Options o;
  o.threads = uint32_t(args.get_u64("threads", 8));
  for (uint64_t n : args.get_u64_list("queues", "1,4,16,64", 1, 1u << 16)) o.queue_counts.push_back(uint32_t(n));
  o.count = args.get_u64("count", 64ull << 20);
  o.entries = uint32_t(args.get_u64("entries", 4096));
  o.ram_queues = uint32_t(args.get_u64("ram-queues", 8));
  o.ram_size = args.get_size("ram-size", 1ull << 30);
  if (args.has("probe")) o.probe = read_probe(args.get("probe"));
  const auto doorbell = device::parse_doorbell_mode(args.get("doorbell", "auto"));
  if (!doorbell) throw cli::UsageError("--doorbell must be auto, gpu or cpu");
  o.doorbell = *doorbell;
  o.skip_null = args.has("skip-null");
  o.skip_ram = args.has("skip-ram");
  o.skip_cpu = args.has("skip-cpu");
  return o;
}

int run(int argc, char** argv) {
  const cli::Args args(argc, argv, 1, {"threads", "queues", "count", "ram-queues", "ram-size", "entries", "probe", "doorbell"},
                       {"skip-null", "skip-ram", "skip-cpu"});
  if (args.help_asked()) return args.print_help("gpu_cmd_rate", kHelp);
  const Options o = parse(args);
  std::string why;
  if (!host::cuda_device_available(&why)) {
    std::printf("gpu_cmd_rate: no CUDA GPU (%s); nothing to measure\n", why.c_str());
    return 0;
  }
  int failures = 0;
  if (!o.skip_null) failures += null_table(o);
  if (!o.skip_ram) failures += ram_table(o);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return cli::run_tool("gpu_cmd_rate", kHelp, [&] { return run(argc, argv); }); }
