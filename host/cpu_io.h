// CPU-initiated block I/O through one queue pair (the SPDK-like path): splits by MDTS, builds PRPs
// (lists in per-slot DMA memory prepared once), keeps up to the queue depth in flight, recovers
// from command faults (host/recovering_queue.h: retry, abort, controller reset) and reports what
// it cannot recover with the decoded status and the LBA range.
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "host/controller.h"
#include "host/recovering_queue.h"

namespace gpunvme::host {

struct CpuIoOptions {
  uint32_t queue_depth = 32;               // commands kept in flight
  uint64_t max_command_bytes = 1ull << 20; // further cap below MDTS (PRP list memory is sized for it)
  std::chrono::milliseconds timeout{5000}; // per command: past this it is aborted, then the controller reset
  std::chrono::milliseconds abort_timeout{1000};  // an aborted command still without completion: reset
  nvme::RetryPolicy retry = nvme::kDefaultRetryPolicy;  // max_attempts = 1: no retries
};

struct IoRequest {
  uint8_t opcode;       // nvme::nvm_op::kRead / kWrite
  uint64_t slba;
  uint32_t nblocks;     // <= max_blocks_per_command()
  const DmaBuffer* buffer;
  uint64_t offset;      // into buffer, dword aligned
};

class CpuIo {
 public:
  CpuIo(Controller& controller, QueuePair& queue, uint32_t nsid, const CpuIoOptions& options = {});

  uint32_t nsid() const { return nsid_; }
  uint32_t lba_bytes() const { return lba_bytes_; }
  uint64_t blocks() const { return blocks_; }
  uint32_t max_blocks_per_command() const { return max_blocks_; }

  // Synchronous transfers of any length: the buffer range [offset, offset + nblocks * lba) must lie in `buffer`.
  void read(uint64_t slba, uint64_t nblocks, const DmaBuffer& buffer, uint64_t offset = 0);
  void write(uint64_t slba, uint64_t nblocks, const DmaBuffer& buffer, uint64_t offset = 0);
  void flush();

  // Asynchronous building blocks (benchmarks): submit() returns the request's tag (0..entries-2,
  // stable across retries and resubmissions); reap() returns final completions with `cid` = tag.
  uint16_t submit(const IoRequest& request, bool ring_doorbell = true);
  void ring() { rq_.ring(); }
  uint32_t reap(Completion* out, uint32_t max);
  QueuePair& queue() { return queue_; }

  // What recovery cost so far.
  const RecoveryStats& recovery() const { return rq_.stats(); }

 private:
  void transfer(uint8_t opcode, uint64_t slba, uint64_t nblocks, const DmaBuffer& buffer, uint64_t offset);
  [[noreturn]] void fail(const Outcome& o, const char* what, uint64_t slba, uint64_t nblocks);

  Controller& controller_;
  QueuePair& queue_;
  uint32_t nsid_;
  uint32_t lba_bytes_;
  uint64_t blocks_;
  uint32_t max_blocks_;
  CpuIoOptions options_;
  RecoveringQueue rq_;
  uint64_t page_;
  uint64_t list_bytes_per_cmd_;
  DmaBuffer prp_lists_;  // one PRP-list area per tag: a resubmitted entry still points at its own
  struct InFlight {
    uint64_t slba;
    uint32_t nblocks;
  };
  std::vector<InFlight> in_flight_;  // by tag
  std::vector<uint16_t> free_tags_;
  std::vector<Outcome> outcomes_;    // reap()'s scratch
};

}  // namespace gpunvme::host
