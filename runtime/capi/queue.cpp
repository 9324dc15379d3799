// CPU queue handles: create/delete, synchronous set-up I/O, and the submitter streamers and
// fetchers share.
#include <algorithm>
#include <cstring>

#include "host/cpu_io.h"
#include "runtime/capi/capi_internal.h"

using namespace gpunvme;
using namespace gpunvme::capi;

stream::Submitter& gpunvme_queue::attach(bool pump_thread) {
  std::lock_guard<std::mutex> lock(in_use);  // short; synchronous I/O holding it finishes first
  if (sub && pump != pump_thread)
    refuse("this queue is already driven " + std::string(pump ? "with" : "without") + " a pump thread by " +
           std::to_string(users) + " streamer(s)/fetcher(s); every user of a queue shares one submitter: pass "
           "the same pump_thread, or give this one its own queue");
  if (!sub) {
    sub = std::make_unique<stream::CpuSubmitter>(*ctrl->ctrl, *qp, stream::CpuSubmitterOptions{.pump_thread = pump_thread});
    pump = pump_thread;
  }
  ++users;
  return *sub;
}

void gpunvme_queue::detach() noexcept {
  std::lock_guard<std::mutex> lock(in_use);
  if (--users == 0) sub.reset();  // the pump thread ends with the last user
}

void gpunvme_queue::check_not_driven() const {
  // Not only while reads are in flight: a streamer on another thread may issue some at any moment,
  // and set-up I/O would then race its submitter on the same queue pair.
  if (users > 0)
    refuse("a streamer/fetcher drives this queue (" + std::to_string(users) +
           " attached); use another queue for set-up I/O, or destroy the streamers/fetchers on this one first");
}

namespace gpunvme::capi {

void transfer(host::Controller& c, host::QueuePair& qp, uint32_t nsid, uint64_t slba, uint64_t nblocks, void* buf,
              bool write) {
  host::CpuIo io(c, qp, nsid);
  const uint64_t lba = io.lba_bytes();
  const uint64_t chunk_blocks = std::max<uint64_t>(1, (4ull << 20) / lba);
  host::DmaBuffer bounce(c.transport(), std::min(chunk_blocks, std::max<uint64_t>(nblocks, 1)) * lba);
  for (uint64_t done = 0; done < nblocks;) {
    const uint64_t n = std::min(chunk_blocks, nblocks - done);
    uint8_t* p = static_cast<uint8_t*>(buf) + done * lba;
    if (write) {
      std::memcpy(bounce.host(), p, n * lba);
      io.write(slba + done, n, bounce, 0);
    } else {
      io.read(slba + done, n, bounce, 0);
      std::memcpy(p, bounce.host(), n * lba);
    }
    done += n;
  }
}

}  // namespace gpunvme::capi

namespace {

// The whole request is checked before the first command: a transfer that cannot complete changes
// neither the namespace nor the caller's buffer.
gpunvme_err_t sync_io(gpunvme_queue_t* queue, uint32_t nsid, uint64_t slba, uint64_t nblocks, void* buf, bool write) {
  auto held = claim(queue, "queue");
  if (!buf) refuse(std::string("argument '") + (write ? "src" : "dst") + "' is NULL");
  queue->check_not_driven();
  const host::NamespaceInfo& ns = queue->ctrl->ctrl->namespace_info(nsid);
  if (nblocks > ns.blocks || slba > ns.blocks - nblocks)
    refuse("blocks " + std::to_string(slba) + " + " + std::to_string(nblocks) + " are not all inside namespace " +
           std::to_string(nsid) + " (blocks 0.." + std::to_string(ns.blocks - 1) + "); nothing was " +
           (write ? "written" : "read"));
  const uint64_t bytes = nblocks * ns.lba_bytes;  // <= the namespace's bytes: no overflow
  if (reinterpret_cast<uintptr_t>(buf) > UINTPTR_MAX - bytes)
    refuse("a buffer of " + std::to_string(bytes) + " bytes at " + std::to_string(reinterpret_cast<uintptr_t>(buf)) +
           " would wrap around the address space");
  transfer(*queue->ctrl->ctrl, *queue->qp, nsid, slba, nblocks, buf, write);
  return GPUNVME_OK;
}

}  // namespace

extern "C" {

gpunvme_err_t gpunvme_create_io_queue(gpunvme_ctrl_t* ctrl, uint16_t qid, uint32_t entries, gpunvme_queue_t** out) {
  return guard("gpunvme_create_io_queue", [&] {
    if (out) *out = nullptr;
    live(ctrl, "ctrl");
    GPUNVME_NEED(out);
    auto q = std::make_unique<gpunvme_queue>();
    q->ctrl = ctrl;
    q->qp = ctrl->ctrl->create_io_queue_pair(qid, entries);  // admin commands: serialized by the controller
    ++ctrl->queues;
    *out = q.release();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_delete_io_queue(gpunvme_queue_t* queue) {
  return guard("gpunvme_delete_io_queue", [&] {
    if (!queue) return GPUNVME_OK;
    auto held = claim(queue, "queue");
    queue->check_unused("this queue");
    gpunvme_ctrl* ctrl = queue->ctrl;
    std::unique_ptr<host::QueuePair> qp = std::move(queue->qp);
    destroy(queue, held);  // the handle goes even if the controller refuses the deletion
    --ctrl->queues;
    ctrl->ctrl->delete_io_queue_pair(*qp);
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_write(gpunvme_queue_t* queue, uint32_t nsid, uint64_t slba, uint64_t nblocks, const void* src) {
  return guard("gpunvme_write",
               [&] { return sync_io(queue, nsid, slba, nblocks, const_cast<void*>(src), /*write=*/true); });
}

gpunvme_err_t gpunvme_read(gpunvme_queue_t* queue, uint32_t nsid, uint64_t slba, uint64_t nblocks, void* dst) {
  return guard("gpunvme_read", [&] { return sync_io(queue, nsid, slba, nblocks, dst, /*write=*/false); });
}

}  // extern "C"
