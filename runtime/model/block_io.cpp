#include "runtime/model/block_io.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "runtime/model/model_error.h"

namespace gpunvme::model {

void check_lba_size(uint32_t lba_size) {
  if (lba_size < 512 || !std::has_single_bit(lba_size)) {
    throw ModelError("LBA size " + std::to_string(lba_size) +
                     " is not a power of two >= 512; NVMe formats use 512 or 4096 byte blocks");
  }
}

DeviceByteSource::DeviceByteSource(const BlockIo& io, uint64_t start_lba, uint64_t size)
    : io_(io), start_lba_(start_lba), size_(size) {
  check_lba_size(io.lba_size);
  if (!io.read) throw ModelError("DeviceByteSource: the BlockIo has no read callback");
}

std::string DeviceByteSource::describe() const {
  return io_.name + " (model at LBA " + std::to_string(start_lba_) + ")";
}

size_t DeviceByteSource::read(uint64_t offset, void* dst, size_t len) {
  if (offset >= size_) return 0;
  len = static_cast<size_t>(std::min<uint64_t>(len, size_ - offset));
  const uint64_t bs = io_.lba_size;
  const uint64_t first = offset / bs;
  const uint64_t last = (offset + len + bs - 1) / bs;  // exclusive
  // Bounded bounce buffer: at most 1 MiB (rounded to blocks) per device read.
  const uint64_t max_blocks = std::max<uint64_t>(1, (1u << 20) / bs);
  std::vector<uint8_t> buf;
  auto* out = static_cast<uint8_t*>(dst);
  size_t done = 0;
  for (uint64_t b = first; b < last;) {
    auto n = static_cast<uint32_t>(std::min(max_blocks, last - b));
    buf.resize(n * bs);
    io_.read(start_lba_ + b, n, buf.data());
    uint64_t chunk_start = b * bs;
    uint64_t from = std::max(offset + done, chunk_start) - chunk_start;
    size_t take = static_cast<size_t>(std::min<uint64_t>(n * bs - from, len - done));
    std::memcpy(out + done, buf.data() + from, take);
    done += take;
    b += n;
  }
  return done;
}

}  // namespace gpunvme::model
