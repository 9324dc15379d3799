// Who issues a plan's commands. The streamer and the fetcher only hand over spans of ready-made
// templates (plan/command_plan.h) and ask whether they completed; the submitter copies them into
// an SQ, stamps command ids, rings the doorbell and reaps completions.
//
//   CpuSubmitter (cpu_submitter.h): host::QueuePair from the CPU. Works everywhere (emulator, CI).
//   GPU submitter (not written yet, see docs/runtime.md "GPU submitter"): a kernel launched on a
//     cudaStream_t that copies the templates into a GPU-owned SQ (host::QueueMemoryView with
//     sq_device/cq_device and the doorbells of Transport::bar0_for_gpu), stamps ids, rings, polls
//     the CQ and sets a per-ticket flag in device memory that a cudaStreamWaitValue32 or a
//     consumer kernel waits on. It implements the same four calls; issue() takes the stream from
//     the caller through a GPU-specific overload.
#pragma once
#include <cstdint>
#include <span>

#include "driver/commands.h"

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
};

}  // namespace gpunvme::stream
