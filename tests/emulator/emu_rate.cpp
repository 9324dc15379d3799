// Command-rate probe for the emulator's I/O path (not a test): host threads keep every SQ full of
// pre-built null-namespace reads and only count completions, so the emulator is what is measured.
//   emulator_rate [device-string] [queues] [host-threads] [seconds] [queue-entries]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "driver/commands.h"
#include "driver/memory_order.h"
#include "driver/registers.h"
#include "host/emulator/controller.h"

using namespace gpunvme;

namespace {

struct Q {
  uint16_t qid;
  uint32_t entries;
  nvme::SubmissionEntry* sq;
  nvme::CompletionEntry* cq;
  uint64_t sq_iova, cq_iova;
  volatile uint32_t* sq_db;
  volatile uint32_t* cq_db;
  uint32_t tail = 0, head = 0, phase = 1;
};

void* page_alloc(size_t n) {
  void* p = std::aligned_alloc(4096, (n + 4095) & ~size_t(4095));
  std::memset(p, 0, (n + 4095) & ~size_t(4095));
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dev = argc > 1 ? argv[1] : "emu:null,queues=64,threads=8,poll=spin,ready_ms=0";
  const uint32_t nq = argc > 2 ? uint32_t(std::atoi(argv[2])) : 64;
  const uint32_t nh = argc > 3 ? uint32_t(std::atoi(argv[3])) : 8;
  const double seconds = argc > 4 ? std::atof(argv[4]) : 3.0;
  const uint32_t entries = argc > 5 ? uint32_t(std::atoi(argv[5])) : 1024;
  auto ctrl = emu::open_emulated(dev);
  volatile uint32_t* bar = ctrl->bar0();
  const uint32_t dstrd = ctrl->config().dstrd;
  const auto map = [&](size_t n) {
    void* p = page_alloc(n);
    return std::make_pair(p, ctrl->dma_map(p, (n + 4095) & ~size_t(4095)).bus(0));
  };
  // Admin queue and enable.
  auto [asq, asq_iova] = map(64 * 64);
  auto [acq, acq_iova] = map(64 * 16);
  nvme::mmio_write32(bar + nvme::reg::kAqa / 4, nvme::Aqa::make(64, 64).raw);
  nvme::mmio_write64(bar + nvme::reg::kAsq / 4, asq_iova);
  nvme::mmio_write64(bar + nvme::reg::kAcq / 4, acq_iova);
  nvme::mmio_write32(bar + nvme::reg::kCc / 4, nvme::Cc{}.with_iosqes(6).with_iocqes(4).with_en(true).raw);
  while (!nvme::Csts{nvme::mmio_read32(bar + nvme::reg::kCsts / 4)}.rdy()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  uint32_t at = 0, aphase = 1;
  const auto admin = [&](nvme::SubmissionEntry e) {
    e.cid = uint16_t(at + 1);
    static_cast<nvme::SubmissionEntry*>(asq)[at] = e;
    nvme::publish_entries_before_doorbell();
    nvme::mmio_write32(bar + nvme::sq_tail_doorbell_offset(0, dstrd) / 4, (at + 1) % 64);
    volatile uint16_t* st = &static_cast<nvme::CompletionEntry*>(acq)[at].status;
    while ((*st & 1u) != aphase) std::this_thread::sleep_for(std::chrono::microseconds(20));
    const uint16_t s = *st >> 1;
    at = (at + 1) % 64;
    if (at == 0) aphase ^= 1;
    nvme::mmio_write32(bar + nvme::cq_head_doorbell_offset(0, dstrd) / 4, at);
    if (s != 0) {
      std::fprintf(stderr, "admin command %u failed: status 0x%x\n", e.opcode, s);
      std::exit(1);
    }
  };
  admin(nvme::make_set_num_queues(uint16_t(nq), uint16_t(nq)));
  std::vector<Q> qs(nq);
  for (uint32_t i = 0; i < nq; ++i) {
    Q& q = qs[i];
    q.qid = uint16_t(i + 1);
    q.entries = entries;
    auto [s, si] = map(size_t(entries) * 64);
    auto [c, ci] = map(size_t(entries) * 16);
    q.sq = static_cast<nvme::SubmissionEntry*>(s);
    q.cq = static_cast<nvme::CompletionEntry*>(c);
    q.sq_db = bar + nvme::sq_tail_doorbell_offset(q.qid, dstrd) / 4;
    q.cq_db = bar + nvme::cq_head_doorbell_offset(q.qid, dstrd) / 4;
    for (uint32_t k = 0; k < entries; ++k) {
      q.sq[k] = nvme::make_read(1, k, 8, 0, 0);
      q.sq[k].cid = uint16_t(k);
    }
    admin(nvme::make_create_io_cq(q.qid, entries, ci));
    admin(nvme::make_create_io_sq(q.qid, entries, si, q.qid));
  }
  std::atomic<bool> go{false}, stop{false};
  std::vector<uint64_t> done(nh * 8, 0);
  std::vector<std::thread> hosts;
  for (uint32_t t = 0; t < nh; ++t) {
    hosts.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      uint64_t n = 0;
      for (uint32_t i = t; i < nq; i += nh) {  // fill: all but one slot
        qs[i].tail = entries - 1;
        nvme::publish_entries_before_doorbell();
        nvme::mmio_write32(qs[i].sq_db, qs[i].tail);
      }
      while (!stop.load(std::memory_order_relaxed)) {
        for (uint32_t i = t; i < nq; i += nh) {
          Q& q = qs[i];
          uint32_t got = 0;
          while (got < entries - 1) {
            const volatile uint16_t* st = &q.cq[q.head].status;
            if ((*st & 1u) != q.phase) break;
            if (++q.head == entries) {
              q.head = 0;
              q.phase ^= 1;
            }
            ++got;
          }
          if (got == 0) continue;
          n += got;
          nvme::mmio_write32(q.cq_db, q.head);
          q.tail = (q.tail + got) % entries;
          nvme::mmio_write32(q.sq_db, q.tail);
        }
      }
      done[t * 8] = n;
    });
  }
  const auto s0 = ctrl->stats();
  const auto t0 = std::chrono::steady_clock::now();
  go.store(true);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const auto s1 = ctrl->stats();
  const auto t1 = std::chrono::steady_clock::now();
  stop.store(true);
  for (auto& h : hosts) h.join();
  const double dt = std::chrono::duration<double>(t1 - t0).count();
  const double rate = double(s1.io_commands - s0.io_commands) / dt;
  std::printf("%s: %u queues x %u entries, %u host threads: %.1f M commands/s (%.2f s, errors %llu)\n", dev.c_str(), nq,
              entries, nh, rate / 1e6, dt, static_cast<unsigned long long>(s1.errors));
  return 0;
}
