// The built-in emulated NVMe controller: the default target of every tool, test and benchmark.
//
// BAR0 is a page-aligned block of ordinary memory laid out like a PCIe controller's (registers at 0,
// doorbells from 0x1000 with stride 4 << CAP.DSTRD). The host writes it with plain volatile stores;
// controller threads watch it: one admin thread (registers, admin queue, enable/disable/shutdown) and
// `io_threads` I/O threads, each serving a fixed subset of I/O completion queues and their SQs.
// Host memory is reachable only through dma_map()'s IOVAs (see dma_table.h).
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "driver/commands.h"
#include "driver/registers.h"
#include "driver/status.h"
#include "host/emulator/config.h"
#include "host/emulator/dma_table.h"
#include "host/emulator/drive_model.h"
#include "host/emulator/faults.h"
#include "host/emulator/namespace.h"
#include "host/emulator/qsbr.h"
#include "host/emulator/queues.h"
#include "host/transport.h"

namespace gpunvme::emu {

// Counters since construction (they survive controller resets). Per queue: index = SQ id, 0 = admin.
struct Stats {
  uint64_t io_commands = 0;      // I/O commands completed (any status), all queues
  uint64_t admin_commands = 0;
  uint64_t reads = 0;
  uint64_t writes = 0;
  uint64_t flushes = 0;
  uint64_t write_zeroes = 0;
  uint64_t errors = 0;           // commands completed with a non-success status (faults included)
  uint64_t bytes_read = 0;       // data moved to the host (null namespaces count what they would move)
  uint64_t bytes_written = 0;
  std::vector<uint64_t> per_queue;
};

class EmulatedController final : public host::Transport {
 public:
  // Opens the namespaces, lays out BAR0 and starts the controller threads (throws gpunvme::Error).
  explicit EmulatedController(ControllerConfig config);
  // Stops and joins the controller threads (bounded by one idle sleep), unregisters BAR0 from CUDA.
  ~EmulatedController() override;

  // host::Transport
  std::string name() const override { return config_.name; }
  volatile uint32_t* bar0() override { return bar0_; }
  uint64_t bar0_size() const override { return bar0_bytes_; }
  host::DmaTranslation dma_map(void* vaddr, uint64_t len) override;
  void dma_unmap(void* vaddr, uint64_t len) noexcept override;
  volatile uint32_t* bar0_for_gpu(std::string* why) override;

  const ControllerConfig& config() const { return config_; }
  FaultPlan& faults() { return faults_; }
  Stats stats() const;
  uint32_t namespace_count() const { return uint32_t(namespaces_.size()); }
  const Namespace& namespace_at(uint32_t nsid) const { return *namespaces_.at(nsid - 1); }
  // The drive model pacing completions, or nullptr (config().drive limits nothing: the fast path).
  const DriveModel* drive_model() const { return model_.get(); }
  // Diagnostics for tests: live DMA mappings, and the host pointer behind an IOVA range (nullptr if unmapped).
  size_t dma_mappings() const { return dma_.mappings(); }
  void* dma_translate(uint64_t iova, uint64_t len) const { return dma_.translate_locked(iova, len); }
  // Why CSTS.CFS was raised last ("" if never), e.g. "queue memory was unmapped while SQ 3 was live".
  std::string fatal_reason() const;

 private:
  enum class State : uint8_t { kDisabled, kEnabling, kReady, kEnableFailed, kDisabling };
  struct CommandResult {
    uint16_t status = 0;  // Status::field
    uint32_t dw0 = 0;
    bool no_cqe = false;  // the command stays outstanding (Asynchronous Event Request)
    uint32_t nsid = 0;    // for the error log
    uint64_t lba = 0;
  };
  struct alignas(64) ThreadCounters {
    std::atomic<uint64_t> commands{0}, reads{0}, writes{0}, flushes{0}, write_zeroes{0}, errors{0}, bytes_read{0},
        bytes_written{0};
  };
  struct alignas(64) QueueCounter {
    std::atomic<uint64_t> n{0};
  };
  // A batch of commands (io.cpp, io_paced.cpp) also ends once it moved this many bytes, so that its
  // CQEs are posted before the thread copies more: one thread copies a few GB/s, and a batch of large
  // reads held every completion until the last copy, so a burst of reads ended all together (a drive
  // completes each command on its own).
  static constexpr uint64_t kBatchBytes = 128 << 10;
  struct IoContext {
    unsigned index = 0;
    ThreadCounters* counters = nullptr;
    std::vector<iovec> iov;
    int64_t next_due_ns = INT64_MAX;  // earliest paced completion still held on this thread's CQs
  };

  // registers.cpp / controller.cpp
  uint32_t reg32(uint32_t off) const { return nvme::mmio_read32(bar0_ + off / 4); }
  void set_reg32(uint32_t off, uint32_t v) { nvme::mmio_write32(bar0_ + off / 4, v); }
  uint64_t reg64(uint32_t off) const { return nvme::mmio_read64(bar0_ + off / 4); }
  void set_csts(nvme::Csts c) { set_reg32(nvme::reg::kCsts, c.raw); }
  nvme::Csts csts() const { return nvme::Csts{reg32(nvme::reg::kCsts)}; }
  volatile uint32_t* sq_doorbell(uint32_t qid) const;
  volatile uint32_t* cq_doorbell(uint32_t qid) const;
  void admin_thread_main();
  bool admin_step();  // one pass over registers and the admin queue; true when it did work
  // admin_step, one CC/CSTS state at a time (true when it did work).
  using StepTime = std::chrono::steady_clock::time_point;
  bool step_disabled(const nvme::Cc& cc, uint32_t prev_shn, StepTime now);
  bool step_enabling(const nvme::Cc& cc, StepTime now);
  bool step_disabling(StepTime now);
  bool step_ready(const nvme::Cc& cc, StepTime now);
  void begin_reset(StepTime now);
  bool fail_enable(const std::string& why);
  bool start_enable(nvme::Cc cc, std::string* why);
  void finish_enable();
  bool admin_regs_changed() const;
  void teardown_queues();
  void raise_fatal(const std::string& why);
  void remove_device();  // surprise removal: BAR0 all ones for good, nothing processed any more
  bool ring_is_mapped_locked(uint64_t iova, uint64_t len) const;
  void on_unmapped(uint64_t iova, uint64_t len);
  void log_error(uint16_t sqid, uint16_t cid, uint16_t status, uint32_t nsid, uint64_t lba);

  // admin.cpp
  bool serve_admin_queue();
  CommandResult exec_admin(const nvme::SubmissionEntry& e);
  CommandResult admin_identify(const nvme::SubmissionEntry& e);
  CommandResult admin_create_cq(const nvme::SubmissionEntry& e);
  CommandResult admin_create_sq(const nvme::SubmissionEntry& e);
  CommandResult admin_delete_cq(const nvme::SubmissionEntry& e);
  CommandResult admin_delete_sq(const nvme::SubmissionEntry& e);
  CommandResult admin_get_features(const nvme::SubmissionEntry& e);
  CommandResult admin_set_features(const nvme::SubmissionEntry& e);
  CommandResult admin_get_log_page(const nvme::SubmissionEntry& e);
  CommandResult admin_abort(const nvme::SubmissionEntry& e);
  CommandResult copy_to_host(const nvme::SubmissionEntry& e, const void* src, uint64_t len);
  void publish_work(unsigned thread);

  // gpu_bar.cpp
  void unregister_gpu() noexcept;

  // io.cpp
  void io_thread_main(unsigned index);
  size_t serve_cq(const WorkList::Item& item, IoContext& ctx);
  size_t serve_sq(SqState& sq, CqState& cq, IoContext& ctx);
  size_t serve_sq_faulty(SqState& sq, CqState& cq, IoContext& ctx);
  size_t flush_delayed(CqState& cq, std::span<SqState* const> sqs);
  // io_paced.cpp: the path taken when a drive model is configured.
  size_t serve_sq_paced(const WorkList::Item& item, SqState& sq, IoContext& ctx);
  size_t flush_paced(const WorkList::Item& item);
  CommandResult exec_io(const nvme::SubmissionEntry& e, uint16_t sqid, IoContext& ctx);
  // Shared by admin and I/O queues: applies command faults around `exec`. Returns false when the
  // controller turned fatal and the caller must stop.
  template <class Exec>
  bool complete_with_faults(SqState& sq, CqState& cq, const nvme::SubmissionEntry& e, ThreadCounters& tc, Exec exec);

  // What the I/O fast path needs of a namespace, packed (namespaces never change after construction).
  struct NsFast {
    uint64_t blocks;
    uint32_t shift;
    bool null;
  };

  ControllerConfig config_;
  std::vector<std::unique_ptr<Namespace>> namespaces_;
  std::vector<NsFast> ns_fast_;
  nvme::Cap cap_{};
  nvme::Vs vs_{};
  uint64_t max_transfer_ = 0;  // bytes; 0 = no limit
  volatile uint32_t* bar0_ = nullptr;
  uint64_t bar0_bytes_ = 0;

  Qsbr qsbr_;
  DmaTable dma_;
  FaultPlan faults_;
  std::unique_ptr<DriveModel> model_;  // shared by every I/O thread; nullptr: unpaced

  // Admin-thread state (guarded by dma_.write_mutex() while the admin thread runs a pass).
  State state_ = State::kDisabled;
  std::chrono::steady_clock::time_point deadline_{};
  bool never_ready_ = false;
  nvme::Cc enabled_cc_{};
  uint32_t enabled_aqa_ = 0;
  uint64_t page_bytes_ = 4096;
  bool shutdown_pending_ = false;
  uint32_t last_shn_ = 0;
  std::chrono::steady_clock::time_point shutdown_at_{};
  CqState admin_cq_{};
  SqState admin_sq_{};
  std::vector<std::unique_ptr<SqState>> sqs_;  // index = qid
  std::vector<std::unique_ptr<CqState>> cqs_;
  uint32_t granted_sqs_ = 0, granted_cqs_ = 0;  // Number of Queues, current value
  bool queues_allocated_ = false;                // a Set Features Number of Queues was accepted
  bool io_queue_created_ = false;
  uint32_t arbitration_ = 0;
  bool vwc_enabled_ = true;
  uint32_t aer_outstanding_ = 0;
  struct ErrorEntry {
    uint64_t count;
    uint16_t sqid, cid, status;
    uint32_t nsid;
    uint64_t lba;
  };
  std::mutex error_mu_;
  std::vector<ErrorEntry> error_log_;  // newest first, at most 16
  uint64_t error_count_ = 0;
  mutable std::mutex fatal_mu_;
  std::string fatal_reason_;

  // Shared with the I/O threads.
  std::atomic<bool> stop_{false};
  std::atomic<bool> fatal_{false};   // CSTS.CFS pending/raised: nothing is processed until reset
  std::atomic<bool> halted_{false};  // shutdown complete: nothing is processed until reset
  std::atomic<bool> removed_{false}; // surprise removal: set before fatal_, never cleared
  std::atomic<uint64_t> page_bytes_io_{4096};
  std::vector<std::atomic<WorkList*>> work_;          // per I/O thread
  std::vector<std::unique_ptr<ThreadCounters>> counters_;  // per I/O thread, then the admin thread
  std::unique_ptr<QueueCounter[]> queue_counters_;
  std::vector<std::thread> threads_;

  void* gpu_bar0_ = nullptr;
  bool gpu_registered_ = false;
  std::mutex gpu_mu_;
};

// Builds a controller from a configuration or a device string ("emu:ram,size=256M").
std::unique_ptr<EmulatedController> open_emulated(const ControllerConfig& config);
std::unique_ptr<EmulatedController> open_emulated(std::string_view device);

}  // namespace gpunvme::emu
