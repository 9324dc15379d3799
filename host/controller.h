// An NVMe controller brought up from user space over a Transport (NVMe Base 2.0 section 3.5.1):
// reset, admin queue, enable, Identify, Number of Queues, I/O queue pairs, orderly shutdown.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "driver/identify.h"
#include "driver/registers.h"
#include "host/queue_pair.h"
#include "host/transport.h"

namespace gpunvme::host {

struct ControllerOptions {
  uint32_t admin_entries = 64;
  uint32_t io_queues_wanted = 0;  // 0: as many as the controller grants
  std::chrono::milliseconds admin_timeout{5000};
  // Extra bound on CSTS.RDY transitions on top of CAP.TO (which the spec makes authoritative).
  std::chrono::milliseconds ready_timeout_cap{0};  // 0: CAP.TO alone
  DmaOptions memory{};  // for admin and I/O queue memory
  bool verbose = false;
};

struct NamespaceInfo {
  uint32_t nsid = 0;
  uint64_t blocks = 0;       // NSZE
  uint64_t capacity = 0;     // NCAP
  uint32_t lba_bytes = 0;
  uint32_t lba_format = 0;
  uint64_t bytes() const { return blocks * lba_bytes; }
};

class Controller {
 public:
  // Brings the controller up: throws gpunvme::Error naming the step that failed and what was seen.
  explicit Controller(std::unique_ptr<Transport> transport, const ControllerOptions& options = {});
  ~Controller();  // orderly shutdown (CC.SHN = normal), bounded
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  Transport& transport() { return *transport_; }
  nvme::Cap cap() const { return cap_; }
  nvme::Vs version() const { return vs_; }
  uint64_t page_bytes() const { return page_bytes_; }  // CC.MPS in bytes
  const nvme::IdentifyController& identify() const { return id_ctrl_; }
  const std::vector<NamespaceInfo>& namespaces() const { return namespaces_; }
  const NamespaceInfo& namespace_info(uint32_t nsid) const;  // throws kNotFound
  uint64_t max_transfer_bytes() const;  // from MDTS; 0 = unlimited
  uint32_t max_blocks_per_command(uint32_t nsid) const;
  uint32_t io_queues_granted() const { return io_queues_granted_; }
  uint32_t max_queue_entries() const { return cap_.max_queue_entries(); }

  // Creates I/O queue pair `qid` (1..granted) with `entries` slots (2..CAP.MQES+1).
  std::unique_ptr<QueuePair> create_io_queue_pair(uint16_t qid, uint32_t entries, const DmaOptions& memory);
  std::unique_ptr<QueuePair> create_io_queue_pair(uint16_t qid, uint32_t entries) {
    return create_io_queue_pair(qid, entries, options_.memory);
  }
  void delete_io_queue_pair(QueuePair& qp);

  // One admin command, synchronous and bounded. Throws kCommandFailed with the decoded status.
  // Thread-safe: admin commands from several threads (queue creation, say) go one at a time.
  Completion admin(const nvme::SubmissionEntry& entry, const char* what);
  Completion admin(const nvme::SubmissionEntry& entry, const char* what, std::chrono::milliseconds timeout);
  // Same, returning the completion even when its status is an error (no throw for status).
  Completion admin_raw(const nvme::SubmissionEntry& entry, std::chrono::milliseconds timeout);

  // Admin-command data buffer (4 KiB, DMA mapped), for Identify/Get Log Page.
  DmaBuffer& scratch() { return scratch_; }

  // Controller reset and re-initialisation for recovery (section 3.7.2): CC.EN=0, wait CSTS.RDY=0
  // (bounded by CAP.TO), re-enable with the admin queue at the same bus addresses, negotiate the
  // queue count again and recreate every live I/O queue pair at its same bus addresses (its rings
  // reset with QueuePair::reset_rings()). Every command that was in flight on any queue is lost:
  // its owner resubmits it. The caller must keep every user of every queue pair of this controller
  // quiet meanwhile (no CPU submit/poll, GPU pump quiesced); admin commands from other threads wait.
  // Throws kControllerFatal (registers read all ones: removed; CSTS.CFS again after enable) or
  // kTimeout (CSTS.RDY never set) with `why` and what was seen; the controller then stays failed:
  // further admin commands and resets are refused at once instead of timing out one by one.
  void reset(const std::string& why);
  // Resets completed since construction.
  uint64_t resets() const { return resets_.load(std::memory_order_relaxed); }
  // True when BAR0 reads as all ones (surprise removal, or a device that stopped answering).
  bool device_removed() const;
  // CSTS now (one register read).
  nvme::Csts csts() const { return nvme::Csts{read32(nvme::reg::kCsts)}; }
  // True after a reset that failed: nothing more will work on this controller.
  bool failed() const { return failed_.load(std::memory_order_relaxed); }

  // Orderly shutdown now; the destructor does it if not done.
  void shutdown();
  // Controller Fatal Status check; throws kControllerFatal with CSTS if set or the device is gone.
  void check_fatal(const char* during) const;

 private:
  void disable();
  void enable();
  void program_admin_queue();
  Completion admin_raw_locked(const nvme::SubmissionEntry& entry, std::chrono::milliseconds timeout);
  void admin_locked(const nvme::SubmissionEntry& entry, const char* what);
  void recreate_io_queue(QueuePair& qp);
  void track(QueuePair& qp);
  void forget(QueuePair* qp);
  void wait_ready(bool ready, const char* transition);
  void identify_all();
  void negotiate_queues();
  uint32_t read32(uint32_t off) const;
  void write32(uint32_t off, uint32_t v);

  std::unique_ptr<Transport> transport_;
  ControllerOptions options_;
  nvme::Cap cap_{};
  nvme::Vs vs_{};
  uint64_t page_bytes_ = 4096;
  std::unique_ptr<QueuePair> admin_;
  std::mutex admin_mu_;  // one admin command in flight at a time: the admin queue pair is not thread-safe
  DmaBuffer scratch_;
  nvme::IdentifyController id_ctrl_{};
  std::vector<NamespaceInfo> namespaces_;
  uint32_t io_queues_granted_ = 0;
  uint32_t io_queues_requested_ = 0;
  bool shut_down_ = false;
  std::mutex live_mu_;
  std::vector<QueuePair*> live_;  // I/O queue pairs created and not deleted: a reset recreates them
  std::atomic<uint64_t> resets_{0};
  std::atomic<bool> failed_{false};
  std::string failed_why_;  // written under admin_mu_ before failed_ is set
};

}  // namespace gpunvme::host
