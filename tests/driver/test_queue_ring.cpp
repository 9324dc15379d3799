#include <catch2/catch_test_macros.hpp>
#include <vector>

#include "driver/queue_ring.h"

using namespace gpunvme::nvme;

TEST_CASE("ring arithmetic: full keeps one slot empty", "[driver][ring]") {
  CHECK(ring_free(0, 0, 8) == 7);
  CHECK(ring_used(0, 7, 8) == 7);
  CHECK(ring_full(0, 7, 8));
  CHECK(ring_full(3, 2, 8));
  CHECK_FALSE(ring_full(3, 3, 8));
  CHECK(ring_empty(5, 5));
  CHECK(ring_used(6, 2, 8) == 4);
  CHECK(ring_free(6, 2, 8) == 3);
  CHECK(ring_advance(6, 2, 8) == 0);
  CHECK(ring_advance(6, 8, 8) == 6);
  CHECK(ring_next(7, 8) == 0);
}

TEST_CASE("SQ producer and CQ consumer stay in step across many wraps", "[driver][ring]") {
  // A toy controller consumes SQ entries and posts CQEs with its own phase; the host side uses
  // SqRing/CqRing. Every wrap must flip the phase and no entry may be seen twice or missed.
  for (uint32_t entries : {2u, 3u, 8u, 33u}) {
    SqRing sq{entries};
    CqRing cq{entries};
    CqProducer ctrl{entries};
    std::vector<uint32_t> phase_in_slot(entries, 0);  // zeroed CQ memory: phase 0
    std::vector<uint32_t> value_in_slot(entries, 0);
    uint32_t ctrl_sq_head = 0;
    uint32_t submitted = 0, completed = 0, seen = 0;
    for (int step = 0; step < 1000; ++step) {
      const uint32_t n = sq.free_slots() == 0 ? 0 : 1 + step % sq.free_slots();
      sq.claim(n);
      submitted += n;
      // Controller drains what it sees up to the tail, bounded by CQ space.
      while (ctrl_sq_head != sq.tail && !ctrl.full()) {
        ctrl_sq_head = ring_next(ctrl_sq_head, entries);
        const auto s = ctrl.post();
        phase_in_slot[s.index] = s.phase;
        value_in_slot[s.index] = ++completed;
      }
      // Host reaps with the phase tag only.
      while (phase_in_slot[cq.head] == cq.phase) {
        // Completions arrive exactly once and in order: a stale slot would repeat an old value.
        REQUIRE(value_in_slot[cq.head] == ++seen);
        cq.consume(1);
      }
      REQUIRE(seen == completed);
      ctrl.head = cq.head;  // CQ head doorbell
      sq.update_head(ctrl_sq_head);
      REQUIRE(ring_used(sq.head, sq.tail, entries) == submitted - completed);
    }
    CHECK(completed > 5 * entries);  // wrapped several times
  }
}

TEST_CASE("CQ phase expectation looks ahead across the wrap", "[driver][ring]") {
  CqRing cq{4};
  cq.head = 3;
  CHECK(cq.expected_phase(0) == 1);
  CHECK(cq.expected_phase(1) == 0);
  CHECK(cq.slot(1) == 0);
  cq.consume(2);
  CHECK(cq.head == 1);
  CHECK(cq.phase == 0);
  cq.consume(3);
  CHECK(cq.head == 0);
  CHECK(cq.phase == 1);
}
