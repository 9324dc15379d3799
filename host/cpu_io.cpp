#include "host/cpu_io.h"

#include <algorithm>
#include <string>
#include <thread>

#include "driver/commands.h"
#include "driver/prp.h"
#include "host/error.h"

namespace gpunvme::host {
namespace {

RecoveryOptions recovery_options(const CpuIoOptions& o) {
  RecoveryOptions r;
  r.retry = o.retry;
  r.timeout = o.timeout;
  r.abort_timeout = o.abort_timeout;
  return r;
}

// A flush has no LBA range and no PRP list: it goes under a tag no data command uses.
constexpr uint16_t kFlushTag = 0xFFFF;

}  // namespace

CpuIo::CpuIo(Controller& controller, QueuePair& queue, uint32_t nsid, const CpuIoOptions& options)
    : controller_(controller), queue_(queue), nsid_(nsid), options_(options),
      rq_(controller, queue, recovery_options(options)) {
  const NamespaceInfo& ns = controller.namespace_info(nsid);
  lba_bytes_ = ns.lba_bytes;
  blocks_ = ns.blocks;
  page_ = controller.page_bytes();
  uint64_t cap_blocks = std::max<uint64_t>(1, options_.max_command_bytes / lba_bytes_);
  max_blocks_ = uint32_t(std::min<uint64_t>(controller.max_blocks_per_command(nsid), cap_blocks));
  // Worst case a command spans max bytes + one partial page; lists are sized for that once, here.
  const uint64_t max_bytes = uint64_t(max_blocks_) * lba_bytes_;
  const uint64_t entries = nvme::prp_list_entries(page_ - 4, max_bytes, page_);
  list_bytes_per_cmd_ = nvme::prp_list_pages(entries, page_) * page_;
  if (list_bytes_per_cmd_ > 0)
    prp_lists_ = DmaBuffer(controller.transport(), list_bytes_per_cmd_ * queue.entries(), DmaOptions{HugePages::kAuto});
  in_flight_.resize(queue.entries());
  // At most entries - 1 commands fit in the SQ, so that many tags suffice.
  for (uint32_t t = queue.entries() - 1; t-- > 0;) free_tags_.push_back(uint16_t(t));
  outcomes_.resize(64);
  options_.queue_depth = std::clamp<uint32_t>(options_.queue_depth, 1, queue.entries() - 1);
}

uint16_t CpuIo::submit(const IoRequest& r, bool ring_doorbell) {
  const uint64_t bytes = uint64_t(r.nblocks) * lba_bytes_;
  if (r.nblocks == 0 || r.nblocks > max_blocks_)
    throw Error(ErrorKind::kInvalidArgument, "I/O of " + std::to_string(r.nblocks) + " blocks; one command carries 1.." +
                                                 std::to_string(max_blocks_));
  if (r.offset + bytes > r.buffer->size() || (r.offset & 3) != 0)
    throw Error(ErrorKind::kInvalidArgument, "I/O buffer range [" + std::to_string(r.offset) + ", +" + std::to_string(bytes) +
                                                 ") is outside the " + std::to_string(r.buffer->size()) +
                                                 "-byte buffer or not 4-byte aligned");
  if (free_tags_.empty() || rq_.free_slots() == 0)
    throw Error(ErrorKind::kResource, "queue " + std::to_string(queue_.qid()) + " is full (" +
                                          std::to_string(rq_.outstanding()) +
                                          " commands outstanding); reap completions before submitting more");
  // The tag picks the PRP-list area, so it is taken before the entry is built.
  const uint16_t tag = free_tags_.back();
  const uint64_t start = r.offset & ~(page_ - 1);
  const uint64_t in_page = r.offset - start;
  const DmaBuffer& buf = *r.buffer;
  const uint64_t list_base = uint64_t(tag) * list_bytes_per_cmd_;
  nvme::PrpPair prp;
  const bool ok = nvme::build_prps(
      in_page, bytes, page_, [&](uint64_t k) { return buf.bus(start + k * page_); },
      [&](uint32_t j) {
        const uint64_t off = list_base + uint64_t(j) * page_;
        return nvme::PrpListMemory{reinterpret_cast<uint64_t*>(prp_lists_.as<uint8_t>() + off), prp_lists_.bus(off)};
      },
      &prp);
  if (!ok) throw Error(ErrorKind::kInvalidArgument, "cannot describe this buffer with PRPs (offset must be 4-byte aligned)");
  rq_.place(nvme::make_rw(r.opcode, nsid_, r.slba, r.nblocks, prp.prp1, prp.prp2), tag);
  free_tags_.pop_back();
  in_flight_[tag] = InFlight{r.slba, r.nblocks};
  if (ring_doorbell) rq_.ring();
  return tag;
}

uint32_t CpuIo::reap(Completion* out, uint32_t max) {
  const uint32_t n = rq_.reap(outcomes_.data(), std::min<uint32_t>(max, uint32_t(outcomes_.size())));
  for (uint32_t i = 0; i < n; ++i) {
    const Outcome& o = outcomes_[i];
    if (o.tag != kFlushTag) free_tags_.push_back(uint16_t(o.tag));
    out[i] = Completion{uint16_t(o.tag), o.status, o.dw0};
  }
  return n;
}

void CpuIo::fail(const Outcome& o, const char* what, uint64_t slba, uint64_t nblocks) {
  const std::string range = nblocks == 0 ? std::string()
                                         : " of LBA " + std::to_string(slba) + ".." + std::to_string(slba + nblocks - 1) +
                                               " (" + std::to_string(nblocks) + " blocks, nsid " + std::to_string(nsid_) + ")";
  const std::string tries = " after " + std::to_string(o.attempts) + (o.attempts == 1 ? " attempt" : " attempts");
  if (o.lost)
    throw Error(ErrorKind::kTimeout, controller_.transport().name() + ": " + what + range + " got no completion" + tries +
                                         " (each past the " + std::to_string(options_.timeout.count()) +
                                         " ms timeout, then aborted or lost in a controller reset)");
  throw Error(ErrorKind::kCommandFailed,
              controller_.transport().name() + ": " + what + range + " failed" + (o.attempts > 1 ? tries : "") + ": " +
                  nvme::describe(o.status),
              o.status);
}

void CpuIo::transfer(uint8_t opcode, uint64_t slba, uint64_t nblocks, const DmaBuffer& buffer, uint64_t offset) {
  const char* what = opcode == nvme::nvm_op::kRead ? "read" : "write";
  if (slba + nblocks > blocks_ || slba + nblocks < slba)
    throw Error(ErrorKind::kInvalidArgument, std::string(what) + " of LBA " + std::to_string(slba) + " + " +
                                                 std::to_string(nblocks) + " blocks runs past the end of namespace " +
                                                 std::to_string(nsid_) + " (" + std::to_string(blocks_) + " blocks)");
  if (offset + nblocks * lba_bytes_ > buffer.size())
    throw Error(ErrorKind::kInvalidArgument, std::string(what) + " of " + std::to_string(nblocks * lba_bytes_) +
                                                 " bytes does not fit the buffer at offset " + std::to_string(offset));
  uint64_t next = 0;  // blocks submitted
  bool failure = false;
  Outcome failed{};
  uint64_t failed_slba = 0, failed_n = 0;
  try {
    while (next < nblocks || rq_.outstanding() > 0) {
      bool submitted = false;
      while (!failure && next < nblocks && rq_.outstanding() < options_.queue_depth && rq_.free_slots() > 0 &&
             !free_tags_.empty()) {
        const uint32_t n = uint32_t(std::min<uint64_t>(max_blocks_, nblocks - next));
        submit(IoRequest{opcode, slba + next, n, &buffer, offset + next * lba_bytes_}, false);
        next += n;
        submitted = true;
      }
      if (submitted) rq_.ring();
      const uint32_t got = rq_.reap(outcomes_.data(), uint32_t(outcomes_.size()));
      for (uint32_t i = 0; i < got; ++i) {
        const Outcome& o = outcomes_[i];
        free_tags_.push_back(uint16_t(o.tag));
        if (!o.ok() && !failure) {
          failed = o;
          failure = true;
          failed_slba = in_flight_[o.tag].slba;
          failed_n = in_flight_[o.tag].nblocks;
        }
      }
      if (got == 0) std::this_thread::yield();
      if (failure && rq_.outstanding() == 0) fail(failed, what, failed_slba, failed_n);
    }
  } catch (...) {
    // Recovery itself failed (device removed, reset impossible): the tags are free again.
    if (rq_.outstanding() == 0) {
      free_tags_.clear();
      for (uint32_t t = queue_.entries() - 1; t-- > 0;) free_tags_.push_back(uint16_t(t));
    }
    throw;
  }
}

void CpuIo::read(uint64_t slba, uint64_t nblocks, const DmaBuffer& buffer, uint64_t offset) {
  transfer(nvme::nvm_op::kRead, slba, nblocks, buffer, offset);
}

void CpuIo::write(uint64_t slba, uint64_t nblocks, const DmaBuffer& buffer, uint64_t offset) {
  transfer(nvme::nvm_op::kWrite, slba, nblocks, buffer, offset);
}

void CpuIo::flush() {
  if (rq_.outstanding() != 0 || rq_.free_slots() == 0)
    throw Error(ErrorKind::kInvalidArgument, "flush with commands outstanding: reap them first");
  rq_.place(nvme::make_flush(nsid_), kFlushTag);
  rq_.ring();
  for (;;) {
    Outcome o;
    if (rq_.reap(&o, 1) == 0) {
      std::this_thread::yield();
      continue;
    }
    if (!o.ok()) fail(o, "flush", 0, 0);
    return;
  }
}

}  // namespace gpunvme::host
