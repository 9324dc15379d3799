// Construction, BAR0, DMA mapping, the register state machine (enable, disable, shutdown) and stats.
#include "host/emulator/controller.h"

#include <sys/mman.h>

#include <cstring>

#include "driver/prp.h"
#include "host/error.h"

namespace gpunvme::emu {

using Clock = std::chrono::steady_clock;

EmulatedController::EmulatedController(ControllerConfig config) : config_(std::move(config)), dma_(qsbr_) {
  if (config_.namespaces.empty()) throw Error(ErrorKind::kInvalidArgument, "emu: a controller needs at least one namespace");
  if (config_.io_threads == 0) config_.io_threads = 1;
  if (config_.max_io_queues == 0 || config_.max_io_queues > 65535)
    throw Error(ErrorKind::kInvalidArgument, "emu: max_io_queues must be 1..65535");
  if (config_.mqes == 0 || config_.mqes > 65535) throw Error(ErrorKind::kInvalidArgument, "emu: mqes must be 1..65535");
  if (config_.dstrd > 8) throw Error(ErrorKind::kInvalidArgument, "emu: dstrd must be 0..8");
  if (config_.io_threads + 1 > uint32_t(Qsbr::kMaxThreads))
    throw Error(ErrorKind::kInvalidArgument, "emu: too many controller threads");
  for (const NamespaceConfig& ns : config_.namespaces) {
    namespaces_.push_back(std::make_unique<Namespace>(ns));
    ns_fast_.push_back(NsFast{namespaces_.back()->blocks(), namespaces_.back()->lba_shift(), namespaces_.back()->is_null()});
  }

  cap_ = nvme::Cap::make({.mqes = config_.mqes,
                          .cqr = config_.contiguous_queues_required,
                          .to_500ms = config_.to_500ms,
                          .dstrd = config_.dstrd,
                          .css = 0x1,  // NVM command set
                          .mpsmin = 0,  // 4 KiB
                          .mpsmax = 4,  // 64 KiB
                          .cmbs = false});
  vs_ = nvme::Vs::make(1, 4, 0);
  max_transfer_ = nvme::max_transfer_bytes(config_.mdts, cap_.min_page_bytes());
  if (config_.drive.limits_anything())
    model_ = std::make_unique<DriveModel>(
        config_.drive, std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());

  bar0_bytes_ = (nvme::bar0_bytes_for(config_.max_io_queues, config_.dstrd) + 4095) & ~uint64_t(4095);
  void* p = ::mmap(nullptr, bar0_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw Error(ErrorKind::kResource, "emu: cannot allocate BAR0 memory");
  bar0_ = static_cast<volatile uint32_t*>(p);
  nvme::mmio_write64(bar0_ + nvme::reg::kCap / 4, cap_.raw);
  set_reg32(nvme::reg::kVs, vs_.raw);

  sqs_.resize(config_.max_io_queues + 1);
  cqs_.resize(config_.max_io_queues + 1);
  queue_counters_ = std::make_unique<QueueCounter[]>(config_.max_io_queues + 1);
  work_ = std::vector<std::atomic<WorkList*>>(config_.io_threads);
  for (auto& w : work_) w.store(new WorkList{});
  for (uint32_t i = 0; i <= config_.io_threads; ++i) counters_.push_back(std::make_unique<ThreadCounters>());

  for (const Fault& f : config_.faults) faults_.add(f);
  try {
    threads_.emplace_back([this] { admin_thread_main(); });
    for (unsigned i = 0; i < config_.io_threads; ++i) threads_.emplace_back([this, i] { io_thread_main(i); });
  } catch (...) {
    stop_.store(true);
    for (auto& t : threads_) t.join();
    for (auto& w : work_) delete w.load();
    ::munmap(const_cast<uint32_t*>(bar0_), bar0_bytes_);
    throw;
  }
}

EmulatedController::~EmulatedController() {
  stop_.store(true);
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  for (auto& w : work_) delete w.load();
  unregister_gpu();
  ::munmap(const_cast<uint32_t*>(bar0_), bar0_bytes_);
}

std::unique_ptr<EmulatedController> open_emulated(const ControllerConfig& config) {
  return std::make_unique<EmulatedController>(config);
}
std::unique_ptr<EmulatedController> open_emulated(std::string_view device) {
  return std::make_unique<EmulatedController>(parse_emu_device(device));
}

volatile uint32_t* EmulatedController::sq_doorbell(uint32_t qid) const {
  return bar0_ + nvme::sq_tail_doorbell_offset(qid, config_.dstrd) / 4;
}
volatile uint32_t* EmulatedController::cq_doorbell(uint32_t qid) const {
  return bar0_ + nvme::cq_head_doorbell_offset(qid, config_.dstrd) / 4;
}

// ---- DMA ----

host::DmaTranslation EmulatedController::dma_map(void* vaddr, uint64_t len) {
  return host::DmaTranslation::contiguous(dma_.map(vaddr, len));
}

void EmulatedController::dma_unmap(void* vaddr, uint64_t len) noexcept {
  dma_.unmap(vaddr, len, [this](uint64_t iova, uint64_t n) { on_unmapped(iova, n); });
}

// Runs under the DMA write lock, before controller threads are waited for: queue memory that
// disappears under a live queue is a fatal controller error (a real IOMMU would fault the device),
// and the controller stops touching every ring before dma_unmap returns.
void EmulatedController::on_unmapped(uint64_t iova, uint64_t len) {
  const auto overlaps = [&](uint64_t base, uint64_t bytes) { return base < iova + len && iova < base + bytes; };
  // After a completed shutdown the controller touches no queue memory, so freeing it is fine.
  if (halted_.load(std::memory_order_seq_cst)) return;
  std::string why;
  if (state_ == State::kReady) {
    if (admin_sq_.ring && overlaps(admin_sq_.ring_iova, uint64_t(admin_sq_.entries) * nvme::kSqeBytes))
      why = "admin SQ memory was unmapped while the controller was enabled";
    if (admin_cq_.ring && overlaps(admin_cq_.ring_iova, uint64_t(admin_cq_.entries) * nvme::kCqeBytes))
      why = "admin CQ memory was unmapped while the controller was enabled";
  }
  for (size_t q = 1; q < sqs_.size() && why.empty(); ++q) {
    if (sqs_[q] && overlaps(sqs_[q]->ring_iova, uint64_t(sqs_[q]->entries) * nvme::kSqeBytes))
      why = "I/O SQ " + std::to_string(q) + " memory was unmapped while the queue existed";
    if (cqs_[q] && overlaps(cqs_[q]->ring_iova, uint64_t(cqs_[q]->entries) * nvme::kCqeBytes))
      why = "I/O CQ " + std::to_string(q) + " memory was unmapped while the queue existed";
  }
  if (!why.empty()) raise_fatal(why);
}

void EmulatedController::raise_fatal(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(fatal_mu_);
    fatal_reason_ = why;
  }
  fatal_.store(true, std::memory_order_seq_cst);
}

void EmulatedController::remove_device() {
  removed_.store(true, std::memory_order_seq_cst);
  raise_fatal("surprise removal (injected fault)");
}

std::string EmulatedController::fatal_reason() const {
  std::lock_guard<std::mutex> lock(fatal_mu_);
  return fatal_reason_;
}

bool EmulatedController::ring_is_mapped_locked(uint64_t iova, uint64_t len) const {
  return dma_.translate(iova, len) != nullptr;
}

// ---- Register state machine (admin thread) ----

void EmulatedController::admin_thread_main() {
  unsigned idle = 0;
  auto sleep = std::chrono::microseconds(1);
  bool bar_gone = false;
  while (!stop_.load(std::memory_order_relaxed)) {
    if (removed_.load(std::memory_order_seq_cst)) {
      // A removed device answers every BAR read with all ones, and does nothing else, ever.
      if (!bar_gone) std::memset(const_cast<uint32_t*>(bar0_), 0xFF, bar0_bytes_);
      bar_gone = true;
      std::this_thread::sleep_for(config_.max_idle_sleep);
      continue;
    }
    bool did;
    {
      std::lock_guard<std::mutex> lock(dma_.write_mutex());
      did = admin_step();
    }
    if (did) {
      idle = 0;
      sleep = std::chrono::microseconds(1);
      continue;
    }
    // The admin path is never hot: short spin, then sleep up to the configured bound.
    if (++idle < 64) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, config_.max_idle_sleep);
  }
}

// Validates CC and the admin queue registers at CC.EN 0 -> 1 (section 3.5.1 steps 3-4).
bool EmulatedController::start_enable(nvme::Cc cc, std::string* why) {
  const uint32_t mps = cc.mps();
  if (cc.css() != nvme::cc::kCssNvm) *why = "CC.CSS is not the NVM command set";
  else if (mps < cap_.mpsmin() || mps > cap_.mpsmax()) *why = "CC.MPS outside CAP.MPSMIN..MPSMAX";
  else if (cc.ams() != nvme::cc::kAmsRoundRobin) *why = "CC.AMS is not round robin";
  else if (cc.iosqes() != nvme::kIoSqesLog2) *why = "CC.IOSQES is not 6 (64-byte SQ entries)";
  else if (cc.iocqes() != nvme::kIoCqesLog2) *why = "CC.IOCQES is not 4 (16-byte CQ entries)";
  if (!why->empty()) return false;
  const uint64_t page = cc.page_bytes();
  const nvme::Aqa aqa{reg32(nvme::reg::kAqa)};
  const uint64_t asq = reg64(nvme::reg::kAsq), acq = reg64(nvme::reg::kAcq);
  const uint32_t sqn = aqa.sq_entries(), cqn = aqa.cq_entries();
  if (sqn < 2 || cqn < 2) *why = "AQA: admin queues need at least 2 entries";
  else if ((asq & (page - 1)) != 0 || (acq & (page - 1)) != 0) *why = "ASQ/ACQ are not memory-page aligned";
  else if (!ring_is_mapped_locked(asq, uint64_t(sqn) * nvme::kSqeBytes)) *why = "ASQ is not mapped for DMA";
  else if (!ring_is_mapped_locked(acq, uint64_t(cqn) * nvme::kCqeBytes)) *why = "ACQ is not mapped for DMA";
  if (!why->empty()) return false;
  enabled_cc_ = cc;
  enabled_aqa_ = aqa.raw;
  page_bytes_ = page;
  page_bytes_io_.store(page, std::memory_order_relaxed);
  admin_sq_ = SqState{};
  admin_sq_.qid = 0;
  admin_sq_.entries = sqn;
  admin_sq_.ring_iova = asq;
  admin_sq_.ring = static_cast<const nvme::SubmissionEntry*>(dma_.translate(asq, uint64_t(sqn) * nvme::kSqeBytes));
  admin_sq_.tail_db = sq_doorbell(0);
  admin_cq_.qid = 0;
  admin_cq_.entries = cqn;
  admin_cq_.ring_iova = acq;
  admin_cq_.ring = static_cast<nvme::CompletionEntry*>(dma_.translate(acq, uint64_t(cqn) * nvme::kCqeBytes));
  admin_cq_.head_db = cq_doorbell(0);
  admin_cq_.prod = nvme::CqProducer{cqn, 0, 1, 0};
  admin_cq_.drop_held();
  admin_cq_.sq_refs = 1;
  admin_sq_.cq = &admin_cq_;
  return true;
}

bool EmulatedController::admin_regs_changed() const {
  return reg32(nvme::reg::kAqa) != enabled_aqa_ || reg64(nvme::reg::kAsq) != admin_sq_.ring_iova ||
         reg64(nvme::reg::kAcq) != admin_cq_.ring_iova;
}

void EmulatedController::finish_enable() {
  // The admin rings must still be mapped now that the controller starts using them.
  admin_sq_.ring = static_cast<const nvme::SubmissionEntry*>(
      dma_.translate(admin_sq_.ring_iova, uint64_t(admin_sq_.entries) * nvme::kSqeBytes));
  admin_cq_.ring = static_cast<nvme::CompletionEntry*>(
      dma_.translate(admin_cq_.ring_iova, uint64_t(admin_cq_.entries) * nvme::kCqeBytes));
  if (admin_sq_.ring == nullptr || admin_cq_.ring == nullptr) {
    raise_fatal("admin queue memory was unmapped before the controller became ready");
    set_csts(nvme::Csts{}.with_cfs(true));
    state_ = State::kEnableFailed;
    return;
  }
  // Doorbells start at 0 for every queue after a reset.
  for (uint32_t q = 0; q <= config_.max_io_queues; ++q) {
    nvme::mmio_write32(sq_doorbell(q), 0);
    nvme::mmio_write32(cq_doorbell(q), 0);
  }
  set_csts(nvme::Csts{}.with_rdy(true));
  state_ = State::kReady;
}

// Controller reset (CC.EN 1 -> 0, section 3.7.2): every I/O queue is deleted, outstanding commands
// are dropped without completions, features return to their defaults.
void EmulatedController::teardown_queues() {
  for (auto& w : work_) {
    WorkList* old = w.exchange(new WorkList{}, std::memory_order_seq_cst);
    qsbr_.synchronize();
    delete old;
  }
  for (auto& s : sqs_) s.reset();
  for (auto& c : cqs_) c.reset();
  admin_sq_ = SqState{};
  admin_cq_.ring = nullptr;
  admin_cq_.drop_held();
  granted_sqs_ = granted_cqs_ = 0;
  queues_allocated_ = false;
  io_queue_created_ = false;
  arbitration_ = 0;
  vwc_enabled_ = true;
  for (auto& ns : namespaces_) ns->set_write_through(false);
  aer_outstanding_ = 0;
  shutdown_pending_ = false;
}

bool EmulatedController::admin_step() {
  // CAP and VS are read-only: undo stray host writes.
  if (nvme::mmio_read64(bar0_ + nvme::reg::kCap / 4) != cap_.raw) nvme::mmio_write64(bar0_ + nvme::reg::kCap / 4, cap_.raw);
  if (reg32(nvme::reg::kVs) != vs_.raw) set_reg32(nvme::reg::kVs, vs_.raw);

  const auto now = Clock::now();
  const nvme::Cc cc{reg32(nvme::reg::kCc)};
  const bool fatal = fatal_.load(std::memory_order_seq_cst);
  if (fatal && removed_.load(std::memory_order_seq_cst)) return false;  // the loop clears BAR0 next
  if (fatal && !csts().cfs()) set_csts(csts().with_cfs(true));

  const uint32_t prev_shn = last_shn_;
  last_shn_ = cc.shn();
  switch (state_) {
    case State::kDisabled: return step_disabled(cc, prev_shn, now);
    case State::kEnabling: return step_enabling(cc, now);
    case State::kEnableFailed:
      if (cc.en()) return false;
      begin_reset(now);
      return true;
    case State::kDisabling: return step_disabling(now);
    case State::kReady: return step_ready(cc, now);
  }
  return false;
}

// CC.EN went to 0 (or an enable failed and the host cleared EN): queues go, RDY clears after the delay.
void EmulatedController::begin_reset(StepTime now) {
  teardown_queues();
  deadline_ = now + config_.ready_delay;
  state_ = State::kDisabling;
}

// The enable did not happen: CSTS.CFS, and the controller waits for the host to clear CC.EN.
bool EmulatedController::fail_enable(const std::string& why) {
  raise_fatal(why);
  set_csts(nvme::Csts{}.with_cfs(true));
  state_ = State::kEnableFailed;
  return true;
}

bool EmulatedController::step_disabled(const nvme::Cc& cc, uint32_t prev_shn, StepTime now) {
  // A shutdown request while disabled has nothing to do: complete at once (on the 0 -> N edge,
  // so a host that leaves CC.SHN set while it resets does not see SHST change).
  if (cc.shn() != nvme::cc::kShnNone && prev_shn == nvme::cc::kShnNone)
    set_csts(csts().with_shst(nvme::csts::kShstComplete));
  if (!cc.en()) return false;
  std::string why;
  set_csts(nvme::Csts{});
  if (!start_enable(cc, &why)) return fail_enable("enable refused: " + why);
  const auto fault = faults_.on_enable();
  auto delay = config_.ready_delay;
  never_ready_ = false;
  if (fault && fault->kind == FaultKind::kFatalAtEnable) return fail_enable("injected fault: CSTS.CFS at enable");
  if (fault && fault->kind == FaultKind::kSlowReady) delay += fault->delay;
  if (fault && fault->kind == FaultKind::kNeverReady) never_ready_ = true;
  deadline_ = now + delay;
  state_ = State::kEnabling;
  return true;
}

bool EmulatedController::step_enabling(const nvme::Cc& cc, StepTime now) {
  if (!cc.en()) {
    begin_reset(now);
    return true;
  }
  // The host may legally toggle EN 1 -> 0 -> 1 while RDY is still 0, faster than we poll. The
  // admin queue registers may only change while EN is 0, so a change means exactly that:
  // start this enable over with the new values.
  if (admin_regs_changed()) {
    state_ = State::kDisabled;
    return true;
  }
  if (never_ready_ || now < deadline_) return false;
  finish_enable();
  return true;
}

bool EmulatedController::step_disabling(StepTime now) {
  if (now < deadline_) return false;
  // Reset complete: RDY, CFS and SHST clear; the controller is idle again.
  fatal_.store(false, std::memory_order_seq_cst);
  halted_.store(false, std::memory_order_seq_cst);
  set_csts(nvme::Csts{});
  state_ = State::kDisabled;
  return true;
}

bool EmulatedController::step_ready(const nvme::Cc& cc, StepTime now) {
  if (!cc.en()) {
    begin_reset(now);
    return true;
  }
  // Shutdown (section 3.6): SHST goes occurring, data reaches the media, then complete.
  // CSTS.RDY stays 1 while CC.EN is 1.
  if (cc.shn() != nvme::cc::kShnNone && !shutdown_pending_ && csts().shst() == nvme::csts::kShstNormal) {
    set_csts(csts().with_shst(nvme::csts::kShstOccurring));
    shutdown_pending_ = true;
    shutdown_at_ = now + config_.ready_delay;
    return true;
  }
  if (shutdown_pending_) {
    if (now < shutdown_at_) return false;
    if (cc.shn() == nvme::cc::kShnNormal)
      for (auto& ns : namespaces_) ns->flush();
    halted_.store(true, std::memory_order_seq_cst);
    shutdown_pending_ = false;
    set_csts(csts().with_shst(nvme::csts::kShstComplete));
    return true;
  }
  if (fatal_.load(std::memory_order_relaxed) || halted_.load(std::memory_order_relaxed)) return false;
  return serve_admin_queue();
}

void EmulatedController::log_error(uint16_t sqid, uint16_t cid, uint16_t status, uint32_t nsid, uint64_t lba) {
  std::lock_guard<std::mutex> lock(error_mu_);
  ++error_count_;
  error_log_.insert(error_log_.begin(), ErrorEntry{error_count_, sqid, cid, status, nsid, lba});
  if (error_log_.size() > 16) error_log_.pop_back();
}

// ---- Stats ----

Stats EmulatedController::stats() const {
  Stats s;
  for (size_t i = 0; i < counters_.size(); ++i) {
    const ThreadCounters& c = *counters_[i];
    const bool admin = i + 1 == counters_.size();
    (admin ? s.admin_commands : s.io_commands) += c.commands.load(std::memory_order_relaxed);
    s.reads += c.reads.load(std::memory_order_relaxed);
    s.writes += c.writes.load(std::memory_order_relaxed);
    s.flushes += c.flushes.load(std::memory_order_relaxed);
    s.write_zeroes += c.write_zeroes.load(std::memory_order_relaxed);
    s.errors += c.errors.load(std::memory_order_relaxed);
    s.bytes_read += c.bytes_read.load(std::memory_order_relaxed);
    s.bytes_written += c.bytes_written.load(std::memory_order_relaxed);
  }
  s.per_queue.resize(config_.max_io_queues + 1);
  for (uint32_t q = 0; q <= config_.max_io_queues; ++q) s.per_queue[q] = queue_counters_[q].n.load(std::memory_order_relaxed);
  return s;
}

}  // namespace gpunvme::emu
