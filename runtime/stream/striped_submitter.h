// One submitter over the members of a striped set (model/stripe.h): a plan's commands, grouped by
// member (member 0's first, then member 1's, ...), are issued through each member's own submitter
// (its own controller and queues), so the N drives read a layer at the same time. The streamer
// builds such plans and registers each one's grouping (add_plan) before issuing it; the ticket it
// gets back stands for every member's ticket.
//
// Stream-ordered (every member submitter has the capability): a submitter's kernels run one after
// another on their stream, so member 0 issues on the caller's `io` stream and member m >= 1 on its
// own stream (StripeMemberIo), which first waits, on the GPU, for everything enqueued on `io` so far
// (the slot's release); a consumer ordered after the ticket waits for every member's reads.
// device_state() is member 0's state word: a failure of another member's reads is reported by
// wait()/wait_timed() (the streamer's sync() and throw_if_failed()), not in that word.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/stream/submitter.h"

namespace gpunvme::stream {

struct StripeMemberIo {
  Submitter* submitter = nullptr;
  cuda_stream_t io = nullptr;  // member m >= 1's stream for stream-ordered loads (unused for member 0)
};

class StripedSubmitter final : public Submitter, public StreamOrdered {
 public:
  explicit StripedSubmitter(std::vector<StripeMemberIo> members);
  ~StripedSubmitter() override;
  StripedSubmitter(const StripedSubmitter&) = delete;
  StripedSubmitter& operator=(const StripedSubmitter&) = delete;

  uint32_t members() const { return uint32_t(members_.size()); }
  // `commands` (a span that stays alive) holds counts[m] commands of member m, in member order.
  void add_plan(std::span<const nvme::SubmissionEntry> commands, std::vector<uint32_t> counts);

  uint64_t issue(std::span<const nvme::SubmissionEntry> commands) override;
  void progress() override;
  bool done(uint64_t ticket) override;
  void wait(uint64_t ticket) override;
  StreamOrdered* stream_ordered() override { return ordered_ ? this : nullptr; }
  host::RecoveryStats recovery() const override;

  void prepare(std::span<const nvme::SubmissionEntry> commands) override;
  void forget(std::span<const nvme::SubmissionEntry> commands) override;
  uint64_t issue_on(std::span<const nvme::SubmissionEntry> commands, cuda_stream_t io) override;
  void order_after(uint64_t ticket, cuda_stream_t consumer) override;
  const uint32_t* device_state(uint64_t ticket) const override;
  void wait_timed(uint64_t ticket, GpuTicketTimes* times) override;
  void* new_marker() override { return ordered_->new_marker(); }
  void delete_marker(void* marker) noexcept override { ordered_->delete_marker(marker); }
  void mark(void* marker, cuda_stream_t stream) override { ordered_->mark(marker, stream); }
  void wait_marker(cuda_stream_t stream, void* marker) override { ordered_->wait_marker(stream, marker); }
  bool marker_reached(void* marker) override { return ordered_->marker_reached(marker); }
  double marker_ms(void* from, void* to) override { return ordered_->marker_ms(from, to); }

 private:
  struct Part {
    uint32_t member;
    std::span<const nvme::SubmissionEntry> commands;
  };
  std::vector<Part> parts_of(std::span<const nvme::SubmissionEntry> commands) const;
  const std::vector<uint64_t>& member_tickets(uint64_t ticket, const char* what) const;
  StreamOrdered& ordered(uint32_t m) const { return *members_[m].submitter->stream_ordered(); }
  // Waits for every member's ticket (each is forgotten); the first failure is rethrown after all.
  void wait_all(uint64_t ticket, GpuTicketTimes* times);

  std::vector<StripeMemberIo> members_;
  StreamOrdered* ordered_ = nullptr;  // member 0's, when every member has the capability
  void* fork_ = nullptr;              // marker: the members' streams wait for `io` up to an issue_on
  std::unordered_map<const nvme::SubmissionEntry*, std::vector<uint32_t>> plans_;  // span start -> counts
  std::unordered_map<uint64_t, std::vector<uint64_t>> tickets_;                   // ticket -> member tickets (0: none)
  uint64_t next_ = 1;
};

}  // namespace gpunvme::stream
