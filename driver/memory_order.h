// The memory-ordering points of the queue protocol, named once for host and device code.
// A queue's entries live in ordinary (DMA-able) memory and its doorbells in BAR0 (device memory on real
// hardware, ordinary memory under the emulator); the controller is another agent on the system.
#pragma once
#include <cstdint>

#include "driver/compiler.h"

#if !GPUNVME_ON_DEVICE
#include <atomic>
#endif

namespace gpunvme::nvme {

// SQ entries must be globally visible before the controller can see the new tail that covers them.
GPUNVME_HD inline void publish_entries_before_doorbell() {
#if GPUNVME_ON_DEVICE
  __threadfence_system();
#else
  std::atomic_thread_fence(std::memory_order_release);
#endif
}

// After the phase tag says an entry is new, the other CQE fields must be read after that check.
GPUNVME_HD inline void read_fields_after_phase() {
#if GPUNVME_ON_DEVICE
  __threadfence_system();
#else
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
}

// Slots handed back with the CQ head doorbell must have been fully read first.
GPUNVME_HD inline void release_slots_before_head_doorbell() {
#if GPUNVME_ON_DEVICE
  __threadfence_system();
#else
  std::atomic_thread_fence(std::memory_order_release);
#endif
}

// Controller side (emulator): a CQE's fields must be visible before its phase tag flips.
inline void publish_cqe_fields_before_phase() {
#if !GPUNVME_ON_DEVICE
  std::atomic_thread_fence(std::memory_order_release);
#endif
}

// Controller side (emulator): SQ entries are read only after the tail doorbell that covers them.
inline void read_entries_after_doorbell() {
#if !GPUNVME_ON_DEVICE
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
}

// 32-bit register access: one volatile access, never split or merged by the compiler.
GPUNVME_HD inline void mmio_write32(volatile uint32_t* reg, uint32_t value) { *reg = value; }
GPUNVME_HD inline uint32_t mmio_read32(const volatile uint32_t* reg) { return *reg; }

// 64-bit registers (CAP, ASQ, ACQ) as two 32-bit accesses, low dword first: every controller
// must accept this (section 3.1.4), not every one accepts a single 64-bit access over PCIe.
GPUNVME_HD inline void mmio_write64(volatile uint32_t* reg, uint64_t value) {
  reg[0] = uint32_t(value);
  reg[1] = uint32_t(value >> 32);
}
GPUNVME_HD inline uint64_t mmio_read64(const volatile uint32_t* reg) {
  const uint64_t lo = reg[0];
  const uint64_t hi = reg[1];
  return lo | (hi << 32);
}

}  // namespace gpunvme::nvme
