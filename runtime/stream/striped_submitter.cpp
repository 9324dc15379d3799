#include "runtime/stream/striped_submitter.h"

#include <algorithm>
#include <exception>
#include <numeric>
#include <string>

#include "host/error.h"

namespace gpunvme::stream {

StripedSubmitter::StripedSubmitter(std::vector<StripeMemberIo> members) : members_(std::move(members)) {
  if (members_.empty()) throw Error(ErrorKind::kInvalidArgument, "striped submitter: no members");
  bool all = true;
  for (const StripeMemberIo& m : members_) {
    if (!m.submitter) throw Error(ErrorKind::kInvalidArgument, "striped submitter: a member has no submitter");
    all &= m.submitter->stream_ordered() != nullptr;
  }
  if (all) {
    for (size_t m = 1; m < members_.size(); ++m)
      if (!members_[m].io)
        throw Error(ErrorKind::kInvalidArgument, "striped submitter: member " + std::to_string(m) +
                                                     " has a GPU submitter but no stream of its own");
    ordered_ = members_[0].submitter->stream_ordered();
    fork_ = ordered_->new_marker();
  }
}

StripedSubmitter::~StripedSubmitter() {
  for (auto& [id, ts] : tickets_)
    for (size_t m = 0; m < ts.size(); ++m)
      if (ts[m]) try {
          members_[m].submitter->wait(ts[m]);
        } catch (...) {
        }
  if (fork_) ordered_->delete_marker(fork_);
}

void StripedSubmitter::add_plan(std::span<const nvme::SubmissionEntry> commands, std::vector<uint32_t> counts) {
  if (counts.size() != members_.size() || std::accumulate(counts.begin(), counts.end(), uint64_t{0}) != commands.size())
    throw Error(ErrorKind::kInvalidArgument, "striped submitter: a plan's member counts do not add up to its commands");
  plans_[commands.data()] = std::move(counts);
}

std::vector<StripedSubmitter::Part> StripedSubmitter::parts_of(std::span<const nvme::SubmissionEntry> commands) const {
  auto it = plans_.find(commands.data());
  const uint64_t total = it == plans_.end() ? 0 : std::accumulate(it->second.begin(), it->second.end(), uint64_t{0});
  if (it == plans_.end() || total != commands.size())
    throw Error(ErrorKind::kInvalidArgument, "striped submitter: commands of a plan it was not given (add_plan)");
  std::vector<Part> parts;
  size_t off = 0;
  for (uint32_t m = 0; m < members_.size(); ++m) {
    const uint32_t n = it->second[m];
    if (n) parts.push_back({m, commands.subspan(off, n)});
    off += n;
  }
  return parts;
}

uint64_t StripedSubmitter::issue(std::span<const nvme::SubmissionEntry> commands) {
  std::vector<uint64_t> t(members_.size(), 0);
  for (const Part& p : parts_of(commands)) t[p.member] = members_[p.member].submitter->issue(p.commands);
  tickets_.emplace(next_, std::move(t));
  return next_++;
}

void StripedSubmitter::progress() {
  for (auto& m : members_) m.submitter->progress();
}

const std::vector<uint64_t>& StripedSubmitter::member_tickets(uint64_t ticket, const char* what) const {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end())
    throw Error(ErrorKind::kInvalidArgument, std::string("striped submitter ") + what + ": unknown ticket " + std::to_string(ticket));
  return it->second;
}

bool StripedSubmitter::done(uint64_t ticket) {
  if (!tickets_.count(ticket)) return true;  // waited for and forgotten, like the CPU submitter's
  const auto& t = tickets_.at(ticket);
  for (size_t m = 0; m < t.size(); ++m)
    if (t[m] && !members_[m].submitter->done(t[m])) return false;
  return true;
}

void StripedSubmitter::wait_all(uint64_t ticket, GpuTicketTimes* times) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) throw Error(ErrorKind::kInvalidArgument, "striped submitter: unknown ticket " + std::to_string(ticket));
  const std::vector<uint64_t> t = std::move(it->second);
  tickets_.erase(it);
  std::exception_ptr first;
  GpuTicketTimes all{UINT64_MAX, 0};
  for (size_t m = 0; m < t.size(); ++m) {
    if (!t[m]) continue;
    GpuTicketTimes mt;
    try {  // every member is waited for, so no command outlives the call
      if (times) ordered(uint32_t(m)).wait_timed(t[m], &mt);
      else members_[m].submitter->wait(t[m]);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
    all.start_ns = std::min(all.start_ns, mt.start_ns);
    all.end_ns = std::max(all.end_ns, mt.end_ns);
  }
  if (times) *times = all.start_ns == UINT64_MAX ? GpuTicketTimes{} : all;
  if (first) std::rethrow_exception(first);
}

void StripedSubmitter::wait(uint64_t ticket) { wait_all(ticket, nullptr); }

host::RecoveryStats StripedSubmitter::recovery() const {
  host::RecoveryStats r;
  for (const auto& m : members_) r += m.submitter->recovery();
  return r;
}

void StripedSubmitter::prepare(std::span<const nvme::SubmissionEntry> commands) {
  for (const Part& p : parts_of(commands)) ordered(p.member).prepare(p.commands);
}

void StripedSubmitter::forget(std::span<const nvme::SubmissionEntry> commands) {
  for (const Part& p : parts_of(commands)) ordered(p.member).forget(p.commands);
  plans_.erase(commands.data());
}

uint64_t StripedSubmitter::issue_on(std::span<const nvme::SubmissionEntry> commands, cuda_stream_t io) {
  const std::vector<Part> parts = parts_of(commands);
  // The other members' streams start after what `io` holds so far (a slot release the caller waited for).
  ordered_->mark(fork_, io);
  std::vector<uint64_t> t(members_.size(), 0);
  for (const Part& p : parts) {
    cuda_stream_t s = p.member == 0 ? io : members_[p.member].io;
    if (p.member != 0) ordered_->wait_marker(s, fork_);
    t[p.member] = ordered(p.member).issue_on(p.commands, s);
  }
  tickets_.emplace(next_, std::move(t));
  return next_++;
}

void StripedSubmitter::order_after(uint64_t ticket, cuda_stream_t consumer) {
  const auto& t = member_tickets(ticket, "order_after");
  for (size_t m = 0; m < t.size(); ++m)
    if (t[m]) ordered(uint32_t(m)).order_after(t[m], consumer);
}

const uint32_t* StripedSubmitter::device_state(uint64_t ticket) const {
  const auto& t = member_tickets(ticket, "device_state");
  for (size_t m = 0; m < t.size(); ++m)
    if (t[m]) return ordered(uint32_t(m)).device_state(t[m]);
  return nullptr;
}

void StripedSubmitter::wait_timed(uint64_t ticket, GpuTicketTimes* times) { wait_all(ticket, times); }

}  // namespace gpunvme::stream
