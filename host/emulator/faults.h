// Fault injection: per-test plans of controller misbehaviour, checked at register and queue level.
// A plan is empty in normal runs; the I/O path then pays one relaxed load per batch.
// Device strings arm plans too ("emu:ram,fault=drop:every=1000"; grammar in fault_spec.h).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace gpunvme::emu {

enum class FaultKind : uint8_t {
  // Command faults (scoped by SQ id, opcode, and which matching command):
  kDelayCompletion,  // the command executes; its CQE is posted `delay` later
  kDropCompletion,   // the command executes; no CQE is ever posted
  kErrorStatus,      // the command is not executed; it completes with sct/sc/dnr
  kFatalOnCommand,   // CSTS.CFS is set when the command is fetched; nothing more is processed until reset
  kWrongCid,         // the command executes; its CQE carries cid ^ cid_xor
  kSurpriseRemoval,  // the command is not executed; BAR0 reads all ones from now on, nothing more is processed
  // Enable faults (at a CC.EN 0 -> 1 transition; `nth` counts enables):
  kFatalAtEnable,    // CSTS.CFS is set instead of CSTS.RDY
  kSlowReady,        // CSTS.RDY follows `delay` later than the configured ready delay
  kNeverReady,       // CSTS.RDY is never set
};

inline constexpr int32_t kAnyQueue = -1;
inline constexpr int32_t kAnyIoQueue = -2;  // every SQ but the admin queue

struct Fault {
  FaultKind kind = FaultKind::kErrorStatus;
  int32_t qid = kAnyQueue;  // SQ id (0 = admin), kAnyQueue or kAnyIoQueue
  int32_t opcode = -1;     // -1 any opcode
  uint64_t nth = 1;        // fires first on the nth matching command (or enable), 1-based
  uint64_t every = 0;      // 0: then on consecutive matches; N: then on every Nth match (nth, nth+N, ...)
  uint64_t times = 1;      // fires this many times in all; 0 = no limit
  std::chrono::microseconds at{0};  // counts matches only from this long after the fault is armed
  std::chrono::microseconds delay{0};  // kDelayCompletion, kSlowReady
  uint8_t sct = 0;         // kErrorStatus
  uint8_t sc = 0x06;       // kErrorStatus (default Internal Error)
  bool dnr = false;        // kErrorStatus
  uint16_t cid_xor = 0x8000;  // kWrongCid
};

class FaultPlan {
 public:
  // Arms a fault; returns its id.
  int add(const Fault& f);
  void remove(int id);
  void clear();
  // How many times fault `id` fired so far.
  uint64_t fired(int id) const;

  // Controller side. Whether any command fault is armed (hot path, relaxed).
  bool commands_armed() const { return commands_armed_.load(std::memory_order_relaxed); }
  // The fault that applies to this command, if any; counts the match for every armed command fault.
  std::optional<Fault> on_command(uint16_t sqid, uint8_t opcode);
  // The fault that applies to this enable, if any.
  std::optional<Fault> on_enable();

 private:
  struct Armed {
    int id;
    Fault f;
    std::chrono::steady_clock::time_point from;  // armed + f.at
    uint64_t seen = 0;
    uint64_t fired = 0;
    bool owed = false;  // was due on a command another fault took
  };
  static bool fires_on(const Armed& a);
  static bool is_enable_fault(FaultKind k) {
    return k == FaultKind::kFatalAtEnable || k == FaultKind::kSlowReady || k == FaultKind::kNeverReady;
  }
  bool exhausted(const Armed& a) const { return a.f.times != 0 && a.fired >= a.f.times; }
  std::optional<Fault> match(bool enable, uint16_t sqid, uint8_t opcode);
  void refresh_armed();

  mutable std::mutex mu_;
  std::vector<Armed> faults_;
  std::vector<std::pair<int, uint64_t>> retired_;  // fired counts of removed/cleared faults
  int next_id_ = 1;
  std::atomic<bool> commands_armed_{false};
};

}  // namespace gpunvme::emu
