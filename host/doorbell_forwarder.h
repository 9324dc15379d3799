// Doorbells for GPUs that cannot write the controller's BAR0: kernels store each new SQ tail / CQ head
// into a small host-memory mailbox (one 32-bit slot per doorbell, mapped into the GPU), and one host
// thread forwards every changed slot to the real doorbell register.
//
// Why forwarding only the latest value is enough: a doorbell carries a ring position, not an event.
// Between two forwards a tail can move at most entries - 1 slots (the controller consumes nothing it
// was not told about), so a changed value is always a real change and the newest value covers every
// entry written before it. Batching is therefore free: many kernel stores, one register write.
//
// Latency is bounded: the thread spins while doorbells keep changing and, after `spin` without a
// change, sleeps `idle_sleep` between scans; a store is forwarded at most idle_sleep + one scan (plus
// the scheduler's wake-up) after it lands. stop() (and the destructor) forwards what is pending, then
// joins. A slot value outside its ring is never written to the device: it is counted and reported.
//
// Controller resets (GPU recovery, device/queue_set.h): the queues are recreated with their rings at
// 0, so the registers and the slots must start over there too. pause() forwards what is pending and
// then holds every later store; rebase() sets a slot and its last forwarded value (no register
// write: the reset already cleared it); resume() forwards again. Without the pause a store made
// before the reset could reach a recreated queue's register after it.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gpunvme::host {

// One doorbell the forwarder serves: the register (CPU view of BAR0) and its ring's size.
struct DoorbellRoute {
  volatile uint32_t* doorbell = nullptr;
  uint32_t entries = 0;  // a value >= entries is refused (not a ring position)
  uint32_t initial = 0;  // the position the register holds now; the slot starts there
};

struct DoorbellForwarderOptions {
  std::chrono::nanoseconds spin = std::chrono::microseconds(200);       // busy-poll this long after a change
  std::chrono::nanoseconds idle_sleep = std::chrono::microseconds(20);  // then sleep this long between scans
  bool gpu_mapped = false;  // register the mailbox with CUDA so kernels can store into it
};

class DoorbellForwarder {
 public:
  // Allocates the mailbox (one slot per route, in route order), sets each slot to its route's initial
  // value and starts the thread. Throws gpunvme::Error (bad route, or CUDA refuses the mailbox).
  DoorbellForwarder(std::vector<DoorbellRoute> routes, const DoorbellForwarderOptions& options = {});
  ~DoorbellForwarder();
  DoorbellForwarder(const DoorbellForwarder&) = delete;
  DoorbellForwarder& operator=(const DoorbellForwarder&) = delete;

  uint32_t slots() const { return uint32_t(routes_.size()); }
  // Where the agent standing in for the register stores: the CPU view (tests, CPU producers) ...
  uint32_t* slot(uint32_t i) const { return mailbox_ + i; }
  // ... and the GPU view (nullptr unless gpu_mapped).
  volatile uint32_t* device_slot(uint32_t i) const { return device_mailbox_ ? device_mailbox_ + i : nullptr; }

  // Register writes made so far, and slot values refused because they were outside the ring.
  uint64_t forwarded() const { return forwarded_.load(std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  // "slot 3 held 4096 (ring of 1024 entries)" for the first refusal, "" when none.
  std::string first_refusal() const;

  // Forwards what is pending and joins the thread. Idempotent; the destructor calls it.
  void stop() noexcept;

  // Recovery (see the top of this file). pause() returns once nothing more will be forwarded;
  // rebase() needs a pause (throws kInvalidArgument otherwise, or for a position outside the ring).
  void pause();
  void rebase(uint32_t slot, uint32_t position);
  void resume();
  bool paused() const;

 private:
  void run();
  uint32_t forward_pending();  // one scan, under mu_

  std::vector<DoorbellRoute> routes_;
  mutable std::mutex mu_;       // one scan at a time; held by pause/rebase/resume
  bool paused_ = false;         // under mu_
  std::vector<uint32_t> last_;  // value last written to each register (under mu_)
  DoorbellForwarderOptions options_;
  uint32_t* mailbox_ = nullptr;
  uint64_t mailbox_bytes_ = 0;
  volatile uint32_t* device_mailbox_ = nullptr;
  bool cuda_registered_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> forwarded_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<int64_t> first_refused_slot_{-1};
  std::atomic<uint32_t> first_refused_value_{0};
  std::thread thread_;
};

}  // namespace gpunvme::host
