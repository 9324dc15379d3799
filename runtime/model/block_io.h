// The only thing the model-on-device code needs from a device: read (and, for deployment, write)
// whole logical blocks. The host library's namespace object, a file standing in for a namespace
// in tests, or the emulator can all provide these two callbacks.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "runtime/gguf/byte_source.h"

namespace gpunvme::model {

struct BlockIo {
  uint32_t lba_size = 512;  // bytes per logical block: a power of two >= 512 (NVMe LBADS >= 9)
  uint64_t n_lbas = 0;      // namespace capacity in blocks
  // Read/write `count` blocks starting at `lba`; buffers are count * lba_size bytes. Throw on error.
  std::function<void(uint64_t lba, uint32_t count, void* dst)> read;
  std::function<void(uint64_t lba, uint32_t count, const void* src)> write;
  std::string name = "device";

  uint64_t capacity_bytes() const { return n_lbas * lba_size; }
};

// Throws ModelError unless lba_size is a power of two >= 512.
void check_lba_size(uint32_t lba_size);

// Bytes [0, size) of a model stored from `start_lba` on, read through whole-block reads (a bounce
// buffer covers unaligned starts and ends). Lets GgufFile::read parse the header off the device.
class DeviceByteSource final : public gguf::ByteSource {
 public:
  DeviceByteSource(const BlockIo& io, uint64_t start_lba, uint64_t size);
  size_t read(uint64_t offset, void* dst, size_t len) override;
  uint64_t size() const override { return size_; }
  std::string describe() const override;

 private:
  const BlockIo& io_;
  uint64_t start_lba_;
  uint64_t size_;
};

}  // namespace gpunvme::model
