// Quiescent-state based reclamation for the emulator's controller threads.
// Controller threads read shared, rarely changing state (the DMA map, their queue work lists) with
// no lock on the hot path. Each thread brackets one polling pass with enter()/leave(); a writer
// publishes a new version, calls synchronize(), and may then free the old one: every pass that could
// have seen it has ended. Threads leave before they sleep, so a sleeping thread never delays a writer.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>

namespace gpunvme::emu {

class Qsbr {
 public:
  static constexpr int kMaxThreads = 80;

  int register_thread() {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < kMaxThreads; ++i) {
      if (!slots_[i].used.load()) {
        slots_[i].epoch.store(0);
        slots_[i].used.store(true);
        return i;
      }
    }
    return -1;
  }
  void unregister_thread(int slot) {
    slots_[slot].epoch.store(0);
    slots_[slot].used.store(false);
  }

  // seq_cst store then the caller's seq_cst/acquire loads of published pointers: a writer that sees
  // epoch 0 here has published before this pass starts reading (see synchronize()).
  void enter(int slot) { slots_[slot].epoch.store(global_.load(std::memory_order_seq_cst), std::memory_order_seq_cst); }
  void leave(int slot) { slots_[slot].epoch.store(0, std::memory_order_release); }

  // Waits until every registered thread other than `self` has been quiescent since this call began.
  void synchronize(int self = -1) {
    const uint64_t target = global_.fetch_add(1, std::memory_order_seq_cst) + 1;
    for (int i = 0; i < kMaxThreads; ++i) {
      if (i == self || !slots_[i].used.load(std::memory_order_seq_cst)) continue;
      for (;;) {
        const uint64_t e = slots_[i].epoch.load(std::memory_order_seq_cst);
        if (e == 0 || e >= target) break;
        std::this_thread::sleep_for(std::chrono::microseconds(5));
      }
    }
  }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> epoch{0};
    std::atomic<bool> used{false};
  };
  std::mutex mu_;
  std::atomic<uint64_t> global_{1};
  Slot slots_[kMaxThreads];
};

}  // namespace gpunvme::emu
