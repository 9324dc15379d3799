#include "runtime/io/cpu_block_io.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "host/dma_memory.h"

namespace gpunvme::model {
namespace {

// The callbacks share `io` (kept alive by `owner` when the adapter made it) and one bounce buffer.
BlockIo make(host::Controller& controller, host::CpuIo& io, std::shared_ptr<host::CpuIo> owner, std::string name) {
  BlockIo b;
  b.lba_size = io.lba_bytes();
  b.n_lbas = io.blocks();
  b.name = std::move(name);
  const uint64_t lba = io.lba_bytes();
  auto bounce = std::make_shared<host::DmaBuffer>(controller.transport(), std::max(kBounceBytes, lba));
  const uint64_t per = bounce->size() / lba;
  b.read = [&io, owner, bounce, per, lba](uint64_t first, uint32_t count, void* dst) {
    auto* out = static_cast<uint8_t*>(dst);
    for (uint64_t done = 0; done < count;) {
      const uint64_t n = std::min<uint64_t>(per, count - done);
      io.read(first + done, n, *bounce, 0);
      std::memcpy(out + done * lba, bounce->host(), n * lba);
      done += n;
    }
  };
  b.write = [&io, owner, bounce, per, lba](uint64_t first, uint32_t count, const void* src) {
    const auto* in = static_cast<const uint8_t*>(src);
    for (uint64_t done = 0; done < count;) {
      const uint64_t n = std::min<uint64_t>(per, count - done);
      std::memcpy(bounce->host(), in + done * lba, n * lba);
      io.write(first + done, n, *bounce, 0);
      done += n;
    }
  };
  return b;
}

}  // namespace

BlockIo cpu_block_io(host::Controller& controller, host::CpuIo& io, std::string name) {
  return make(controller, io, nullptr, std::move(name));
}

BlockIo cpu_block_io(host::Controller& controller, host::QueuePair& qp, uint32_t nsid, std::string name) {
  auto io = std::make_shared<host::CpuIo>(controller, qp, nsid);
  return make(controller, *io, io, std::move(name));
}

}  // namespace gpunvme::model
