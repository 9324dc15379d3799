// Test-only host side for the emulator: DMA buffers mapped through the emulator, register access,
// SQE submission and bounded CQE polling. Deliberately independent of host/controller.*.
#pragma once
#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>

#include "driver/commands.h"
#include "driver/memory_order.h"
#include "driver/queue_ring.h"
#include "driver/registers.h"
#include "driver/status.h"
#include "host/emulator/controller.h"
#include "host/error.h"

namespace emutest {

using namespace gpunvme;
using namespace std::chrono_literals;

inline nvme::Status status_of(const nvme::CompletionEntry& c) { return nvme::Status::from_cqe_status(c.status); }
inline bool is_status(const nvme::CompletionEntry& c, uint8_t type, uint8_t code) {
  const auto s = status_of(c);
  return s.type() == type && s.code() == code;
}

// Page-aligned, zeroed host memory mapped for the emulator's DMA.
class DmaBuf {
 public:
  DmaBuf(emu::EmulatedController& c, size_t bytes) : c_(&c), len_((bytes + 4095) & ~size_t(4095)) {
    p_ = std::aligned_alloc(4096, len_);
    std::memset(p_, 0, len_);
    iova_ = c.dma_map(p_, len_).bus(0);
  }
  ~DmaBuf() {
    if (mapped_) c_->dma_unmap(p_, len_);
    std::free(p_);
  }
  DmaBuf(const DmaBuf&) = delete;
  DmaBuf& operator=(const DmaBuf&) = delete;
  void unmap() {
    if (mapped_) c_->dma_unmap(p_, len_);
    mapped_ = false;
  }
  template <class T = uint8_t>
  T* as() const { return static_cast<T*>(p_); }
  uint64_t iova(uint64_t off = 0) const { return iova_ + off; }
  size_t size() const { return len_; }

 private:
  emu::EmulatedController* c_;
  size_t len_;
  void* p_ = nullptr;
  uint64_t iova_ = 0;
  bool mapped_ = true;
};

struct Queue {
  uint16_t qid = 0;
  uint32_t entries = 0;
  std::unique_ptr<DmaBuf> sq, cq;
  nvme::SqRing sqr{};
  nvme::CqRing cqr{};
  uint16_t next_cid = 1;
};

template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds timeout = 2000ms) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(20us);
  }
  return true;
}

class Harness {
 public:
  explicit Harness(std::string_view spec) : Harness(emu::parse_emu_device(spec)) {}
  explicit Harness(const emu::ControllerConfig& cfg) : ctrl_(emu::open_emulated(cfg)) {
    bar_ = ctrl_->bar0();
    cap_ = nvme::Cap{nvme::mmio_read64(bar_ + nvme::reg::kCap / 4)};
  }
  emu::EmulatedController& ctrl() { return *ctrl_; }
  nvme::Cap cap() const { return cap_; }

  uint32_t read32(uint32_t off) { return nvme::mmio_read32(bar_ + off / 4); }
  void write32(uint32_t off, uint32_t v) { nvme::mmio_write32(bar_ + off / 4, v); }
  void write64(uint32_t off, uint64_t v) { nvme::mmio_write64(bar_ + off / 4, v); }
  nvme::Csts csts() { return nvme::Csts{read32(nvme::reg::kCsts)}; }
  volatile uint32_t* sq_db(uint16_t qid) { return bar_ + nvme::sq_tail_doorbell_offset(qid, cap_.dstrd()) / 4; }
  volatile uint32_t* cq_db(uint16_t qid) { return bar_ + nvme::cq_head_doorbell_offset(qid, cap_.dstrd()) / 4; }

  std::unique_ptr<DmaBuf> alloc(size_t bytes) { return std::make_unique<DmaBuf>(*ctrl_, bytes); }

  static nvme::Cc good_cc() {
    return nvme::Cc{}.with_css(0).with_mps(0).with_iosqes(6).with_iocqes(4).with_en(true);
  }
  // Programs the admin queue and CC, sets EN; returns whether RDY came up within `timeout`.
  bool try_enable(uint32_t admin_entries = 16, nvme::Cc cc = good_cc(), std::chrono::milliseconds timeout = 2000ms) {
    admin_ = Queue{};
    admin_.entries = admin_entries;
    admin_.sq = alloc(admin_entries * 64);
    admin_.cq = alloc(admin_entries * 16);
    admin_.sqr = nvme::SqRing{admin_entries, 0, 0};
    admin_.cqr = nvme::CqRing{admin_entries, 0, 1};
    write32(nvme::reg::kAqa, nvme::Aqa::make(admin_entries, admin_entries).raw);
    write64(nvme::reg::kAsq, admin_.sq->iova());
    write64(nvme::reg::kAcq, admin_.cq->iova());
    write32(nvme::reg::kCc, cc.raw);
    return wait_until([&] { return csts().rdy() || csts().cfs(); }, timeout) && csts().rdy();
  }
  void enable(uint32_t admin_entries = 16) { REQUIRE(try_enable(admin_entries)); }
  bool disable(std::chrono::milliseconds timeout = 2000ms) {
    write32(nvme::reg::kCc, nvme::Cc{read32(nvme::reg::kCc)}.with_en(false).raw);
    io_.clear();
    queues_set_ = false;
    return wait_until([&] { return !csts().rdy() && !csts().cfs(); }, timeout);
  }

  Queue& admin() { return admin_; }

  uint16_t submit(Queue& q, nvme::SubmissionEntry e, bool ring = true) {
    e.cid = q.next_cid++;
    if (q.next_cid == 0) q.next_cid = 1;
    const uint32_t slot = q.sqr.claim(1);
    std::memcpy(q.sq->as<nvme::SubmissionEntry>() + slot, &e, sizeof e);
    if (ring) ring_sq(q);
    return e.cid;
  }
  void ring_sq(Queue& q) {
    nvme::publish_entries_before_doorbell();
    nvme::mmio_write32(sq_db(q.qid), q.sqr.tail);
  }
  // Next new CQE, if one arrives in time; `release` rings the CQ head doorbell after consuming it.
  std::optional<nvme::CompletionEntry> poll(Queue& q, std::chrono::milliseconds timeout = 2000ms, bool release = true) {
    auto* ring = q.cq->as<nvme::CompletionEntry>();
    const volatile uint16_t* st = &ring[q.cqr.head].status;
    if (!wait_until([&] { return (*st & 1u) == q.cqr.phase; }, timeout)) return std::nullopt;
    nvme::read_fields_after_phase();
    nvme::CompletionEntry c;
    std::memcpy(&c, &ring[q.cqr.head], sizeof c);
    q.cqr.consume(1);
    q.sqr.update_head(c.sqhd);
    if (release) release_cq(q);
    return c;
  }
  void release_cq(Queue& q) {
    nvme::release_slots_before_head_doorbell();
    nvme::mmio_write32(cq_db(q.qid), q.cqr.head);
  }
  nvme::CompletionEntry run(Queue& q, const nvme::SubmissionEntry& e) {
    const uint16_t cid = submit(q, e);
    auto c = poll(q);
    REQUIRE(c.has_value());
    REQUIRE(c->cid == cid);
    REQUIRE(c->sqid == q.qid);
    return *c;
  }
  nvme::CompletionEntry admin_cmd(const nvme::SubmissionEntry& e) { return run(admin_, e); }

  // Set Features Number of Queues (once), then Create I/O CQ + SQ.
  Queue& create_pair(uint16_t qid, uint32_t entries, uint32_t cq_entries = 0) {
    if (!queues_set_) {
      auto c = admin_cmd(nvme::make_set_num_queues(64, 64));
      REQUIRE(status_of(c).ok());
      queues_set_ = true;
    }
    if (cq_entries == 0) cq_entries = entries;
    auto q = std::make_unique<Queue>();
    q->qid = qid;
    q->entries = entries;
    q->sq = alloc(size_t(entries) * 64);
    q->cq = alloc(size_t(cq_entries) * 16);
    q->sqr = nvme::SqRing{entries, 0, 0};
    q->cqr = nvme::CqRing{cq_entries, 0, 1};
    auto c1 = admin_cmd(nvme::make_create_io_cq(qid, cq_entries, q->cq->iova()));
    REQUIRE(status_of(c1).ok());
    auto c2 = admin_cmd(nvme::make_create_io_sq(qid, entries, q->sq->iova(), qid));
    REQUIRE(status_of(c2).ok());
    io_.push_back(std::move(q));
    return *io_.back();
  }

 private:
  std::unique_ptr<emu::EmulatedController> ctrl_;
  volatile uint32_t* bar_ = nullptr;
  nvme::Cap cap_{};
  Queue admin_;
  std::vector<std::unique_ptr<Queue>> io_;
  bool queues_set_ = false;
};

}  // namespace emutest
