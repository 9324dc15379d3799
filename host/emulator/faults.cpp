#include "host/emulator/faults.h"

namespace gpunvme::emu {

int FaultPlan::add(const Fault& f) {
  std::lock_guard<std::mutex> lock(mu_);
  Armed a;
  a.id = next_id_++;
  a.f = f;
  if (a.f.nth == 0) a.f.nth = 1;
  a.from = std::chrono::steady_clock::now() + f.at;
  faults_.push_back(a);
  refresh_armed();
  return a.id;
}

void FaultPlan::remove(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < faults_.size(); ++i) {
    if (faults_[i].id == id) {
      retired_.emplace_back(id, faults_[i].fired);
      faults_.erase(faults_.begin() + long(i));
      break;
    }
  }
  refresh_armed();
}

void FaultPlan::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Armed& a : faults_) retired_.emplace_back(a.id, a.fired);
  faults_.clear();
  refresh_armed();
}

uint64_t FaultPlan::fired(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Armed& a : faults_)
    if (a.id == id) return a.fired;
  for (const auto& r : retired_)
    if (r.first == id) return r.second;
  return 0;
}

void FaultPlan::refresh_armed() {
  bool any = false;
  for (const Armed& a : faults_) any |= !is_enable_fault(a.f.kind) && !exhausted(a);
  commands_armed_.store(any, std::memory_order_relaxed);
}

// Whether the match just counted (a.seen) is one the fault fires on.
bool FaultPlan::fires_on(const Armed& a) {
  if (a.seen < a.f.nth) return false;
  return a.f.every == 0 || (a.seen - a.f.nth) % a.f.every == 0;
}

std::optional<Fault> FaultPlan::match(bool enable, uint16_t sqid, uint8_t opcode) {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<Fault> hit;
  std::chrono::steady_clock::time_point now{};
  for (Armed& a : faults_) {
    if (is_enable_fault(a.f.kind) != enable || exhausted(a)) continue;
    if (!enable && a.f.qid >= 0 && uint32_t(a.f.qid) != sqid) continue;
    if (!enable && a.f.qid == kAnyIoQueue && sqid == 0) continue;
    if (!enable && a.f.opcode >= 0 && uint32_t(a.f.opcode) != opcode) continue;
    if (a.f.at.count() > 0) {
      if (now == std::chrono::steady_clock::time_point{}) now = std::chrono::steady_clock::now();
      if (now < a.from) continue;
    }
    ++a.seen;
    // Two faults due on one command: the first armed fires, the other fires on its next match
    // (owed), so coinciding periods (every=5000 and every=10000) both keep their counts.
    if (!fires_on(a) && !a.owed) continue;
    if (hit) {
      a.owed = true;
      continue;
    }
    a.owed = false;
    ++a.fired;
    hit = a.f;
  }
  if (hit) refresh_armed();
  return hit;
}

std::optional<Fault> FaultPlan::on_command(uint16_t sqid, uint8_t opcode) { return match(false, sqid, opcode); }
std::optional<Fault> FaultPlan::on_enable() { return match(true, 0, 0); }

}  // namespace gpunvme::emu
