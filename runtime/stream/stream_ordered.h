// Stream-ordered submission: the capability a GPU submitter adds to the Submitter interface
// (Submitter::stream_ordered() returns it, or nullptr for host-only submitters). With it, a
// kernel on a CUDA stream issues a ticket's reads and other streams order themselves after them;
// the host only enqueues. The streamer and fetchers use this interface and never name the GPU
// submitter (gpu_submitter.h implements it).
#pragma once
#include <cstdint>
#include <span>

#include "driver/commands.h"
#include "runtime/stream/cuda_stream.h"

namespace gpunvme::stream {

// GPU timestamps of a finished ticket (%globaltimer, ns).
struct GpuTicketTimes {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  double ms() const { return end_ns > start_ns ? (end_ns - start_ns) / 1e6 : 0; }
};

class StreamOrdered {
 public:
  virtual ~StreamOrdered() = default;
  // Keeps a device copy of templates that will be issued many times (the span stays alive and
  // unchanged until forget()).
  virtual void prepare(std::span<const nvme::SubmissionEntry> commands) = 0;
  virtual void forget(std::span<const nvme::SubmissionEntry> commands) = 0;
  // Enqueues the reads on `io`; returns a ticket of the Submitter's kind.
  virtual uint64_t issue_on(std::span<const nvme::SubmissionEntry> commands, cuda_stream_t io) = 0;
  // Work enqueued on `consumer` after this call runs after the ticket's reads completed.
  virtual void order_after(uint64_t ticket, cuda_stream_t consumer) = 0;
  // Device pointer to the ticket's state word (ticket_state::*, gpu_ticket.h).
  virtual const uint32_t* device_state(uint64_t ticket) const = 0;
  // Submitter::wait(), plus the ticket's GPU timestamps (filled also when it throws).
  virtual void wait_timed(uint64_t ticket, GpuTicketTimes* times) = 0;

  // Stream markers (CUDA events, opaque here) for consumers that order or time work on streams
  // of their own: the streamer's slot releases and compute-stream stalls.
  virtual void* new_marker() = 0;                                  // created with timing
  virtual void delete_marker(void* marker) noexcept = 0;
  virtual void mark(void* marker, cuda_stream_t stream) = 0;       // records it at the stream's end
  virtual void wait_marker(cuda_stream_t stream, void* marker) = 0;  // the stream waits for it
  virtual bool marker_reached(void* marker) = 0;                   // the stream passed it
  // Milliseconds between two reached markers, or a negative value when unknown.
  virtual double marker_ms(void* from, void* to) = 0;
};

}  // namespace gpunvme::stream
