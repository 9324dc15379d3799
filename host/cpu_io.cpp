#include "host/cpu_io.h"

#include <algorithm>
#include <string>
#include <thread>

#include "driver/commands.h"
#include "driver/prp.h"
#include "host/error.h"

namespace gpunvme::host {

CpuIo::CpuIo(Controller& controller, QueuePair& queue, uint32_t nsid, const CpuIoOptions& options)
    : controller_(controller), queue_(queue), nsid_(nsid), options_(options) {
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
  // The command id picks the PRP-list area, so it is taken before the entry is built.
  const uint16_t cid = queue_.take_cid();
  const uint64_t start = r.offset & ~(page_ - 1);
  const uint64_t in_page = r.offset - start;
  const DmaBuffer& buf = *r.buffer;
  const uint64_t list_base = uint64_t(cid) * list_bytes_per_cmd_;
  nvme::PrpPair prp;
  const bool ok = nvme::build_prps(
      in_page, bytes, page_, [&](uint64_t k) { return buf.bus(start + k * page_); },
      [&](uint32_t j) {
        const uint64_t off = list_base + uint64_t(j) * page_;
        return nvme::PrpListMemory{reinterpret_cast<uint64_t*>(prp_lists_.as<uint8_t>() + off), prp_lists_.bus(off)};
      },
      &prp);
  if (!ok) {
    queue_.release_cid(cid);
    throw Error(ErrorKind::kInvalidArgument, "cannot describe this buffer with PRPs (offset must be 4-byte aligned)");
  }
  queue_.place(cid, nvme::make_rw(r.opcode, nsid_, r.slba, r.nblocks, prp.prp1, prp.prp2));
  in_flight_[cid] = InFlight{r.slba, r.nblocks};
  if (ring_doorbell) queue_.ring_sq_doorbell();
  return cid;
}

void CpuIo::fail(const Completion& c, const char* what, uint64_t slba, uint64_t nblocks) {
  throw Error(ErrorKind::kCommandFailed,
              controller_.transport().name() + ": " + what + " of LBA " + std::to_string(slba) + ".." +
                  std::to_string(slba + nblocks - 1) + " (" + std::to_string(nblocks) + " blocks, nsid " +
                  std::to_string(nsid_) + ") failed: " + nvme::describe(c.status),
              c.status);
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
  uint32_t outstanding = 0;
  Completion batch[64];
  bool failure = false;
  Completion failed{};
  uint64_t failed_slba = 0, failed_n = 0;
  const auto deadline_step = options_.timeout;
  auto last_progress = std::chrono::steady_clock::now();
  while (next < nblocks || outstanding > 0) {
    bool submitted = false;
    while (!failure && next < nblocks && outstanding < options_.queue_depth && queue_.free_slots() > 0) {
      const uint32_t n = uint32_t(std::min<uint64_t>(max_blocks_, nblocks - next));
      submit(IoRequest{opcode, slba + next, n, &buffer, offset + next * lba_bytes_}, false);
      next += n;
      ++outstanding;
      submitted = true;
    }
    if (submitted) queue_.ring_sq_doorbell();
    const uint32_t got = queue_.poll(batch, 64);
    for (uint32_t i = 0; i < got; ++i) {
      --outstanding;
      if (!batch[i].ok() && !failure) {
        failed = batch[i];
        failure = true;
        failed_slba = in_flight_[batch[i].cid].slba;
        failed_n = in_flight_[batch[i].cid].nblocks;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (got > 0) {
      last_progress = now;
    } else {
      std::this_thread::yield();
      if (now - last_progress > deadline_step) {
        controller_.check_fatal(what);
        queue_.abandon_in_flight();
        throw Error(ErrorKind::kTimeout, controller_.transport().name() + ": " + what + " on queue " +
                                             std::to_string(queue_.qid()) + ": " + std::to_string(outstanding) +
                                             " commands got no completion within " +
                                             std::to_string(deadline_step.count()) +
                                             " ms; the controller dropped them or hung (queue abandoned)");
      }
    }
    if (failure && outstanding == 0) fail(failed, what, failed_slba, failed_n);
  }
}

void CpuIo::read(uint64_t slba, uint64_t nblocks, const DmaBuffer& buffer, uint64_t offset) {
  transfer(nvme::nvm_op::kRead, slba, nblocks, buffer, offset);
}

void CpuIo::write(uint64_t slba, uint64_t nblocks, const DmaBuffer& buffer, uint64_t offset) {
  transfer(nvme::nvm_op::kWrite, slba, nblocks, buffer, offset);
}

void CpuIo::flush() {
  const uint16_t cid = queue_.submit(nvme::make_flush(nsid_));
  const Completion c = queue_.wait(cid, options_.timeout);
  if (!c.ok()) fail(c, "flush", 0, 0);
}

}  // namespace gpunvme::host
