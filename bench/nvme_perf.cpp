// nvme_perf: block I/O throughput and latency, like spdk_nvme_perf / fio, on any gpunvme device.
// CPU-initiated path: one host thread per I/O queue pair keeps `--qd` commands in flight.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "host/cpu_io.h"
#include "host/error.h"
#include "host/open_device.h"
#include "runtime/cli/args.h"

using namespace gpunvme;
using Clock = std::chrono::steady_clock;

namespace {

const char* kHelp =
    "usage: nvme_perf [options]\n"
    "\n"
    "Measures IOPS, bandwidth and latency percentiles of CPU-initiated NVMe I/O through gpunvme's\n"
    "queue pairs. Each I/O queue is driven by its own host thread keeping --qd commands in flight.\n"
    "\n"
    "  --device DEV      device string (default emu:ram,size=1G). See below.\n"
    "  --bs SIZE         block size per command, e.g. 4K, 128K (default 128K)\n"
    "  --qd N            queue depth per queue (default 32)\n"
    "  --queues N        number of I/O queue pairs / threads (default 1)\n"
    "  --rw MODE         read | write | randread | randwrite | randrw (default read)\n"
    "  --mix PCT         reads as a percentage of randrw (default 70)\n"
    "  --time SEC        run for SEC seconds (default 3) ...\n"
    "  --count N         ... or for N commands in total\n"
    "  --span SIZE       bytes of the namespace to address (default: all of it)\n"
    "  --json            print one JSON object instead of the table\n"
    "\n"
    "Writes are destructive on real devices. Latency is submission to reaped completion, per command.\n"
    "\n";

struct Worker {
  uint64_t ios = 0, bytes = 0, errors = 0;
  std::vector<float> lat_us;  // sampled latencies
  std::string error;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    cli::Args args(argc, argv, 1, {"device", "bs", "qd", "queues", "rw", "mix", "time", "count", "span"}, {"json", "help"});
    if (args.has("help")) {
      std::printf("%s%s", kHelp, host::device_string_help());
      return 0;
    }
    const std::string device = args.get("device", "emu:ram,size=1G");
    const uint64_t bs = args.get_size("bs", 128 * 1024);
    const uint32_t qd = uint32_t(args.get_u64("qd", 32));
    const uint32_t nq = uint32_t(args.get_u64("queues", 1));
    const std::string rw = args.get("rw", "read");
    const uint32_t mix = uint32_t(args.get_u64("mix", 70));
    const double seconds = double(args.get_u64("time", 3));
    const uint64_t count = args.get_u64("count", 0);
    const bool json = args.has("json");
    if (rw != "read" && rw != "write" && rw != "randread" && rw != "randwrite" && rw != "randrw")
      throw cli::UsageError("--rw must be read, write, randread, randwrite or randrw");
    if (qd == 0 || nq == 0) throw cli::UsageError("--qd and --queues must be at least 1");

    host::ControllerOptions copts;
    copts.io_queues_wanted = nq;
    auto ctrl = host::open_controller(device, copts);
    const auto& ns = ctrl->namespaces().at(0);
    if (bs % ns.lba_bytes) throw cli::UsageError("--bs must be a multiple of the " + std::to_string(ns.lba_bytes) + "-byte block");
    if (nq > ctrl->io_queues_granted())
      throw cli::UsageError("--queues " + std::to_string(nq) + ": the controller granted only " +
                            std::to_string(ctrl->io_queues_granted()));
    const uint64_t span_blocks = std::min<uint64_t>(ns.blocks, args.get_size("span", ns.bytes()) / ns.lba_bytes);
    const uint32_t blocks_per_io = uint32_t(bs / ns.lba_bytes);
    if (span_blocks < blocks_per_io) throw cli::UsageError("--span is smaller than one block of --bs");
    const uint32_t entries = std::min<uint32_t>(ctrl->max_queue_entries(), std::max<uint32_t>(qd + 1, 64));
    std::vector<std::unique_ptr<host::QueuePair>> qps;
    for (uint32_t q = 0; q < nq; ++q) qps.push_back(ctrl->create_io_queue_pair(uint16_t(q + 1), entries));

    std::vector<Worker> workers(nq);
    std::atomic<bool> go{false};
    const uint64_t per_queue_count = count ? (count + nq - 1) / nq : 0;
    rusage ru0{};
    getrusage(RUSAGE_SELF, &ru0);
    auto t_start = Clock::now();
    std::vector<std::thread> threads;
    for (uint32_t q = 0; q < nq; ++q) {
      threads.emplace_back([&, q] {
        Worker& w = workers[q];
        try {
          host::CpuIoOptions o;
          o.queue_depth = qd;
          o.max_command_bytes = bs;
          host::CpuIo io(*ctrl, *qps[q], ns.nsid, o);
          if (io.max_blocks_per_command() < blocks_per_io)
            throw Error(ErrorKind::kInvalidArgument, "--bs exceeds the controller's max transfer (MDTS)");
          host::DmaBuffer buf(ctrl->transport(), bs * qd);
          std::memset(buf.host(), 0xA5, buf.size());
          std::mt19937_64 rng(1234 + q);
          const uint64_t slots = span_blocks / blocks_per_io;
          uint64_t seq = (slots / nq) * q;
          std::vector<Clock::time_point> started(qps[q]->entries());
          std::vector<uint32_t> buf_slot_of(qps[q]->entries());
          std::vector<uint32_t> free_buf;
          for (uint32_t i = 0; i < qd; ++i) free_buf.push_back(i);
          host::Completion done[64];
          while (!go.load()) std::this_thread::yield();
          const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
          uint64_t issued = 0;
          uint32_t in_flight = 0;
          uint32_t sample = 0;
          for (;;) {
            const bool more = per_queue_count ? issued < per_queue_count : Clock::now() < deadline;
            bool rang = false;
            while (more && in_flight < qd && (!per_queue_count || issued < per_queue_count)) {
              const bool random = rw.rfind("rand", 0) == 0;
              const uint64_t slot = random ? rng() % slots : (seq++ % slots);
              bool is_read = rw == "read" || rw == "randread" || (rw == "randrw" && rng() % 100 < mix);
              const uint32_t b = free_buf.back();
              free_buf.pop_back();
              const uint16_t cid = io.submit(host::IoRequest{is_read ? nvme::nvm_op::kRead : nvme::nvm_op::kWrite,
                                                             slot * blocks_per_io, blocks_per_io, &buf, uint64_t(b) * bs},
                                             false);
              started[cid] = Clock::now();
              buf_slot_of[cid] = b;
              ++issued;
              ++in_flight;
              rang = true;
            }
            if (rang) io.ring();
            if (in_flight == 0 && !more) break;
            const uint32_t n = io.reap(done, 64);
            const auto now = Clock::now();
            for (uint32_t i = 0; i < n; ++i) {
              --in_flight;
              free_buf.push_back(buf_slot_of[done[i].cid]);
              if (!done[i].ok()) {
                ++w.errors;
                if (w.error.empty()) w.error = nvme::describe(done[i].status);
                continue;
              }
              ++w.ios;
              w.bytes += bs;
              if ((++sample & 7) == 0 || w.lat_us.size() < 100000)
                w.lat_us.push_back(float(std::chrono::duration<double, std::micro>(now - started[done[i].cid]).count()));
            }
          }
        } catch (const std::exception& e) {
          w.error = e.what();
          ++w.errors;
        }
      });
    }
    t_start = Clock::now();
    go = true;
    for (auto& t : threads) t.join();
    const double elapsed = std::chrono::duration<double>(Clock::now() - t_start).count();
    rusage ru1{};
    getrusage(RUSAGE_SELF, &ru1);
    auto tv = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
    const double cpu_s = tv(ru1.ru_utime) - tv(ru0.ru_utime) + tv(ru1.ru_stime) - tv(ru0.ru_stime);

    uint64_t ios = 0, bytes = 0, errors = 0;
    std::vector<float> lat;
    std::string first_error;
    for (auto& w : workers) {
      ios += w.ios;
      bytes += w.bytes;
      errors += w.errors;
      lat.insert(lat.end(), w.lat_us.begin(), w.lat_us.end());
      if (first_error.empty()) first_error = w.error;
    }
    std::sort(lat.begin(), lat.end());
    auto pct = [&](double p) { return lat.empty() ? 0.0 : double(lat[std::min<size_t>(lat.size() - 1, size_t(p * lat.size()))]); };
    for (auto& qp : qps) ctrl->delete_io_queue_pair(*qp);
    const double iops = double(ios) / elapsed, gbs = double(bytes) / elapsed / 1e9;
    if (json) {
      std::printf(
          "{\"device\":\"%s\",\"path\":\"cpu\",\"rw\":\"%s\",\"bs\":%llu,\"qd\":%u,\"queues\":%u,\"seconds\":%.3f,"
          "\"ios\":%llu,\"errors\":%llu,\"iops\":%.1f,\"gbps\":%.4f,\"lat_us\":{\"p50\":%.2f,\"p99\":%.2f,\"p999\":%.2f},"
          "\"cpu_seconds\":%.3f}\n",
          device.c_str(), rw.c_str(), static_cast<unsigned long long>(bs), qd, nq, elapsed,
          static_cast<unsigned long long>(ios), static_cast<unsigned long long>(errors), iops, gbs, pct(0.5), pct(0.99),
          pct(0.999), cpu_s);
    } else {
      std::printf("device %s  path cpu  rw %s  bs %llu  qd %u  queues %u\n", device.c_str(), rw.c_str(),
                  static_cast<unsigned long long>(bs), qd, nq);
      std::printf("  %-12s %14s %10s %10s %10s %10s %10s\n", "ios", "IOPS", "GB/s", "p50 us", "p99 us", "p99.9 us", "CPU s");
      std::printf("  %-12llu %14.0f %10.3f %10.1f %10.1f %10.1f %10.2f\n", static_cast<unsigned long long>(ios), iops, gbs,
                  pct(0.5), pct(0.99), pct(0.999), cpu_s);
      if (errors) std::printf("  %llu errors; first: %s\n", static_cast<unsigned long long>(errors), first_error.c_str());
    }
    return errors ? 1 : 0;
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "nvme_perf: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvme_perf: error: %s\n", e.what());
    return 1;
  }
}
