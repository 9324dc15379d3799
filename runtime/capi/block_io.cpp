// model::BlockIo over a C API queue (model detection and header reads). One function: the tree's
// shared BlockIo-over-queue adapter replaces it at merge.
#include "runtime/capi/block_io.h"

namespace gpunvme::capi {

model::BlockIo block_io(gpunvme_queue* q, uint32_t nsid) {
  host::Controller& c = *q->ctrl->ctrl;
  const auto& ns = c.namespace_info(nsid);
  model::BlockIo io;
  io.lba_size = ns.lba_bytes;
  io.n_lbas = ns.blocks;
  io.name = c.transport().name();
  io.read = [&c, q, nsid](uint64_t lba, uint32_t count, void* dst) { transfer(c, *q->qp, nsid, lba, count, dst, false); };
  io.write = [&c, q, nsid](uint64_t lba, uint32_t count, const void* src) {
    transfer(c, *q->qp, nsid, lba, count, const_cast<void*>(src), true);
  };
  return io;
}

}  // namespace gpunvme::capi
