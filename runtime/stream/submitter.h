// Who issues a plan's commands. The streamer and the fetcher only hand over spans of ready-made
// templates (plan/command_plan.h) and ask whether they completed; the submitter copies them into
// an SQ, stamps command ids, rings the doorbell and reaps completions.
//
//   CpuSubmitter (cpu_submitter.h): host::QueuePair from the CPU. Works everywhere (emulator, CI).
//   GpuSubmitter (gpu_submitter.h, CUDA builds): kernels on a CUDA stream copy the templates into
//     GPU-owned SQs, ring the doorbells and reap the CQs; it implements these four calls (on an
//     internal stream) and also the StreamOrdered capability (stream_ordered.h): issue on the
//     caller's stream, order another stream after a ticket.
#pragma once
#include <cstdint>
#include <span>

#include "driver/commands.h"
#include "host/recovery.h"
#include "runtime/stream/stream_ordered.h"

namespace gpunvme::stream {

class Submitter {
 public:
  virtual ~Submitter() = default;
  // Starts the commands (the templates must stay alive until wait() returns for the ticket);
  // returns a ticket. Never blocks for completions; may leave some commands queued in software
  // when the SQ is full (progress() and wait() submit them).
  virtual uint64_t issue(std::span<const nvme::SubmissionEntry> commands) = 0;
  // Reaps completions and submits queued commands; cheap, non-blocking.
  virtual void progress() = 0;
  // Whether every command of the ticket completed (calls progress()). Does not throw for errors.
  virtual bool done(uint64_t ticket) = 0;
  // Blocks until the ticket's commands completed, then forgets the ticket. Throws gpunvme::Error
  // (kCommandFailed with the LBA range, kTimeout) when a command failed or none completed in time.
  virtual void wait(uint64_t ticket) = 0;
  // Stream-ordered submission (stream_ordered.h), or nullptr: this submitter works from the host only.
  virtual StreamOrdered* stream_ordered() { return nullptr; }
  // What recovering from command faults (retries, aborts, resets) cost so far; zeros when none.
  virtual host::RecoveryStats recovery() const { return {}; }
};

}  // namespace gpunvme::stream
