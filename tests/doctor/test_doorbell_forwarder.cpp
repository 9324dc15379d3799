// The CPU doorbell path without a GPU: a CPU thread plays the kernel (writes SQEs into the ring,
// stores the tail into the mailbox, reaps CQEs, stores the head), the DoorbellForwarder copies the
// mailbox to the emulated controller's doorbells; the reads complete and every byte matches.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "driver/commands.h"
#include "driver/memory_order.h"
#include "driver/queue_ring.h"
#include "driver/status.h"
#include "host/cpu_io.h"
#include "host/doorbell_forwarder.h"
#include "host/error.h"
#include "host/io_patterns.h"
#include "host/open_device.h"

using namespace gpunvme;
using namespace std::chrono_literals;
using Catch::Matchers::ContainsSubstring;

namespace {

void store_slot(uint32_t* slot, uint32_t v) { std::atomic_ref<uint32_t>(*slot).store(v, std::memory_order_release); }

// Waits (bounded) until `pred` holds.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds bound = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(50us);
  }
  return true;
}

}  // namespace

TEST_CASE("reads through mailbox doorbells complete against the emulator and bytes verify", "[doorbell][forwarder]") {
  const uint32_t entries = 32, depth = GENERATE(1u, 8u, 31u);
  auto ctrl = host::open_controller("emu:ram,size=16M,lba=4096");
  const uint32_t lba = 4096, blocks = 512;  // 2 MiB
  auto writer = ctrl->create_io_queue_pair(1, 64);  // lives as long as the controller has the queue
  {
    host::CpuIo io(*ctrl, *writer, 1);
    host::DmaBuffer src(ctrl->transport(), uint64_t(blocks) * lba);
    host::fill_pattern(src.as<uint8_t>(), src.size(), 77);
    io.write(0, blocks, src, 0);
  }
  auto qp = ctrl->create_io_queue_pair(2, entries);
  const host::QueueMemoryView v = qp->view();
  host::DmaBuffer dst(ctrl->transport(), uint64_t(blocks) * lba);
  std::memset(dst.host(), 0, dst.size());

  host::DoorbellForwarder fwd({{v.sq_doorbell, entries, 0}, {v.cq_doorbell, entries, 0}});
  // The stand-in for the kernel: the queue's own rings, doorbells only through the mailbox.
  nvme::SqRing sq{entries, 0, 0};
  nvme::CqRing cq{entries, 0, 1};
  uint32_t issued = 0, reaped = 0, failed = 0, in_flight = 0, stores = 0;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (reaped < blocks && std::chrono::steady_clock::now() < deadline) {
    uint32_t n = 0;
    while (issued < blocks && in_flight < depth && sq.free_slots() > 0) {
      nvme::SubmissionEntry e = nvme::make_read(1, issued, 1, dst.bus(uint64_t(issued) * lba), 0);
      e.cid = uint16_t(issued);
      std::memcpy(v.sq + sq.claim(1), &e, sizeof e);
      ++issued, ++in_flight, ++n;
    }
    if (n) {
      nvme::publish_entries_before_doorbell();
      store_slot(fwd.slot(0), sq.tail);
      ++stores;
    }
    uint32_t got = 0;
    while (in_flight > 0) {
      const volatile nvme::CompletionEntry* c = v.cq + cq.head;
      if (((c->status & 1u) != cq.phase)) break;
      nvme::read_fields_after_phase();
      failed += !nvme::Status::from_cqe_status(c->status).ok();
      sq.update_head(c->sqhd);
      cq.consume(1);
      --in_flight, ++reaped, ++got;
    }
    if (got) {
      nvme::release_slots_before_head_doorbell();
      store_slot(fwd.slot(1), cq.head);
      ++stores;
    }
  }
  INFO("depth " << depth << " issued " << issued << " reaped " << reaped);
  REQUIRE(reaped == blocks);
  CHECK(failed == 0);
  std::vector<uint8_t> want(dst.size());
  host::fill_pattern(want.data(), want.size(), 77);
  CHECK(std::memcmp(dst.host(), want.data(), want.size()) == 0);
  fwd.stop();
  // Every store that changed a slot reached a register, batched: never more writes than stores.
  CHECK(fwd.forwarded() > 0);
  CHECK(fwd.forwarded() <= stores);
  CHECK(fwd.refused() == 0);
  CHECK(nvme::mmio_read32(v.sq_doorbell) == sq.tail);
  CHECK(nvme::mmio_read32(v.cq_doorbell) == cq.head);
}

TEST_CASE("forwarder: bounded latency while idle, final flush on stop, out-of-ring values refused", "[doorbell][forwarder]") {
  uint32_t regs[2] = {0, 0};
  SECTION("a store after an idle spell is forwarded within the sleep bound") {
    host::DoorbellForwarder fwd({{&regs[0], 64, 0}, {&regs[1], 64, 0}},
                                {.spin = 0ns, .idle_sleep = 1ms, .gpu_mapped = false});
    std::this_thread::sleep_for(20ms);  // the thread is now sleeping between scans
    store_slot(fwd.slot(1), 9);
    CHECK(eventually([&] { return nvme::mmio_read32(&regs[1]) == 9; }, 500ms));
    CHECK(regs[0] == 0);
    CHECK(fwd.forwarded() == 1);
  }
  SECTION("stop() forwards what landed after the last scan") {
    host::DoorbellForwarder fwd({{&regs[0], 64, 0}}, {.spin = 0ns, .idle_sleep = 200ms, .gpu_mapped = false});
    std::this_thread::sleep_for(10ms);
    store_slot(fwd.slot(0), 17);
    fwd.stop();
    CHECK(regs[0] == 17);
    fwd.stop();  // idempotent
  }
  SECTION("a value outside the ring never reaches the register") {
    host::DoorbellForwarder fwd({{&regs[0], 64, 5}});
    store_slot(fwd.slot(0), 64);
    REQUIRE(eventually([&] { return fwd.refused() == 1; }));
    CHECK(regs[0] == 0);
    CHECK_THAT(fwd.first_refusal(), ContainsSubstring("slot 0 held 64 (ring of 64 entries)"));
    store_slot(fwd.slot(0), 6);
    CHECK(eventually([&] { return nvme::mmio_read32(&regs[0]) == 6; }));
  }
  SECTION("the mailbox starts at each route's position, so nothing is written until it moves") {
    host::DoorbellForwarder fwd({{&regs[0], 64, 5}, {&regs[1], 64, 7}});
    CHECK(*fwd.slot(0) == 5);
    CHECK(*fwd.slot(1) == 7);
    CHECK(fwd.device_slot(0) == nullptr);
    std::this_thread::sleep_for(5ms);
    CHECK(fwd.forwarded() == 0);
  }
}

TEST_CASE("forwarder: bad routes are refused at construction", "[doorbell][forwarder]") {
  uint32_t reg = 0;
  CHECK_THROWS_AS(host::DoorbellForwarder({}), Error);
  CHECK_THROWS_AS(host::DoorbellForwarder({{nullptr, 64, 0}}), Error);
  CHECK_THROWS_AS(host::DoorbellForwarder({{&reg, 1, 0}}), Error);
  CHECK_THROWS_AS(host::DoorbellForwarder({{&reg, 64, 64}}), Error);
}

// A controller reset under doorbell=cpu (device/queue_set.h): the forwarder is paused once the
// kernels parked, the queues are recreated at 0, the slots rebased there, then forwarding resumes.
TEST_CASE("forwarder: pause holds later stores, rebase restarts a slot at the recreated ring's 0",
          "[doorbell][forwarder][recovery]") {
  uint32_t regs[2] = {0, 0};
  host::DoorbellForwarder fwd({{&regs[0], 64, 0}, {&regs[1], 64, 0}}, {.spin = 0ns, .idle_sleep = 100us});
  store_slot(fwd.slot(0), 37);
  REQUIRE(eventually([&] { return nvme::mmio_read32(&regs[0]) == 37; }));
  store_slot(fwd.slot(1), 12);
  fwd.pause();  // forwards what is pending first
  CHECK(regs[1] == 12);
  CHECK(fwd.paused());
  // A store made while paused (a stale value) never reaches the register.
  store_slot(fwd.slot(0), 40);
  std::this_thread::sleep_for(5ms);
  CHECK(regs[0] == 37);
  // The reset: registers back to 0, slots rebased to 0.
  regs[0] = regs[1] = 0;
  fwd.rebase(0, 0);
  fwd.rebase(1, 0);
  CHECK(*fwd.slot(0) == 0);
  CHECK_THROWS_AS(fwd.rebase(0, 64), Error);
  CHECK_THROWS_AS(fwd.rebase(2, 0), Error);
  fwd.resume();
  CHECK_FALSE(fwd.paused());
  std::this_thread::sleep_for(5ms);
  CHECK(regs[0] == 0);  // nothing stale was written after the resume
  // The old value 37 is a new position after the reset: it must be forwarded, not taken as unchanged.
  store_slot(fwd.slot(0), 37);
  CHECK(eventually([&] { return nvme::mmio_read32(&regs[0]) == 37; }));
  store_slot(fwd.slot(1), 1);
  CHECK(eventually([&] { return nvme::mmio_read32(&regs[1]) == 1; }));
  // rebase() without a pause is refused: the thread could be forwarding the slot.
  CHECK_THROWS_AS(fwd.rebase(0, 0), Error);
}
