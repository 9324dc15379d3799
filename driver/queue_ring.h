// Queue ring arithmetic, written once for host and device code.
// NVMe Base 2.0 section 3.3.1: a queue of N entries is full when one slot is still free
// (head == tail + 1 mod N) and empty when head == tail; the consumer owns [head, tail).
#pragma once
#include <cstdint>

#include "driver/compiler.h"

namespace gpunvme::nvme {

GPUNVME_HD constexpr uint32_t ring_next(uint32_t index, uint32_t entries) {
  return index + 1 == entries ? 0 : index + 1;
}

// index + n modulo entries, for n <= entries.
GPUNVME_HD constexpr uint32_t ring_advance(uint32_t index, uint32_t n, uint32_t entries) {
  const uint32_t r = index + n;
  return r >= entries ? r - entries : r;
}

// Entries between head (consumer) and tail (producer).
GPUNVME_HD constexpr uint32_t ring_used(uint32_t head, uint32_t tail, uint32_t entries) {
  return tail >= head ? tail - head : entries - head + tail;
}

// Slots a producer may still fill: one slot always stays empty so that full != empty.
GPUNVME_HD constexpr uint32_t ring_free(uint32_t head, uint32_t tail, uint32_t entries) {
  return entries - 1 - ring_used(head, tail, entries);
}

GPUNVME_HD constexpr bool ring_empty(uint32_t head, uint32_t tail) { return head == tail; }
GPUNVME_HD constexpr bool ring_full(uint32_t head, uint32_t tail, uint32_t entries) {
  return ring_next(tail, entries) == head;
}

// Producer side of a submission queue: tail is ours, head is learned from CQE.SQHD.
struct SqRing {
  uint32_t entries = 0;
  uint32_t tail = 0;
  uint32_t head = 0;  // last SQHD reported by the controller

  GPUNVME_HD constexpr uint32_t free_slots() const { return ring_free(head, tail, entries); }
  GPUNVME_HD constexpr bool full() const { return ring_full(head, tail, entries); }
  // Claims n consecutive slots starting at the current tail and returns the first one.
  GPUNVME_HD constexpr uint32_t claim(uint32_t n) {
    const uint32_t first = tail;
    tail = ring_advance(tail, n, entries);
    return first;
  }
  GPUNVME_HD constexpr void update_head(uint32_t sqhd) { head = sqhd; }
};

// Consumer side of a completion queue.
// Phase tag (section 4.6, "P"): the controller writes entries with phase 1 on its first pass and
// inverts it on every wrap, so a slot holds a new entry exactly when its phase equals ours.
struct CqRing {
  uint32_t entries = 0;
  uint32_t head = 0;
  uint32_t phase = 1;

  // Phase expected in the slot `ahead` positions past head (ahead < entries).
  GPUNVME_HD constexpr uint32_t expected_phase(uint32_t ahead) const {
    return head + ahead >= entries ? (phase ^ 1u) : phase;
  }
  GPUNVME_HD constexpr uint32_t slot(uint32_t ahead) const { return ring_advance(head, ahead, entries); }
  GPUNVME_HD constexpr void consume(uint32_t n) {
    const uint32_t r = head + n;
    if (r >= entries) {
      head = r - entries;
      phase ^= 1u;
    } else {
      head = r;
    }
  }
};

// Producer side of a completion queue (the controller's view, used by the emulator).
struct CqProducer {
  uint32_t entries = 0;
  uint32_t tail = 0;
  uint32_t phase = 1;
  uint32_t head = 0;  // from the host's CQ head doorbell

  GPUNVME_HD constexpr bool full() const { return ring_full(head, tail, entries); }
  struct Slot {
    uint32_t index;
    uint32_t phase;
  };
  // Takes the next slot and the phase tag its entry must carry.
  GPUNVME_HD constexpr Slot post() {
    const Slot s{tail, phase};
    tail = ring_next(tail, entries);
    if (tail == 0) phase ^= 1u;
    return s;
  }
};

}  // namespace gpunvme::nvme
