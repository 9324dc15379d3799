#include "examples/llm/engine/model_on_device.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "runtime/io/cpu_block_io.h"

namespace gpunvme::llm {

ModelOnDevice open_model(host::Controller& c, host::CpuIo& io) {
  const model::BlockIo b = model::cpu_block_io(c, io, c.transport().name());
  ModelOnDevice m;
  m.detected = model::detect_model(b);
  m.file = std::make_unique<gguf::GgufFile>(model::read_model_header(b, m.detected));
  m.map = std::make_unique<model::LbaMap>(*m.file, io.lba_bytes(), m.detected.start_lba);
  m.config = read_config(*m.file);
  m.weights = map_weights(*m.file, m.config);
  m.vocab = read_vocab(*m.file);
  const uint64_t end = m.device_byte(m.file->data_end());
  if (end > io.blocks() * uint64_t(io.lba_bytes()))
    throw std::runtime_error("the model's tensors run past the end of the namespace: the device holds a truncated copy; deploy it again");
  return m;
}

void read_model_bytes(host::Controller& c, host::CpuIo& io, const ModelOnDevice& m, uint64_t file_offset, uint64_t len,
                      uint8_t* dst) {
  const uint32_t lba = io.lba_bytes();
  host::DmaBuffer bounce(c.transport(), 4u << 20);
  const uint64_t per = bounce.size() / lba;
  uint64_t byte = m.device_byte(file_offset);
  const uint64_t end = byte + len;
  while (byte < end) {
    const uint64_t first = byte / lba;
    const uint64_t blocks = std::min<uint64_t>(per, (end + lba - 1) / lba - first);
    io.read(first, blocks, bounce, 0);
    const uint64_t skip = byte - first * lba;
    const uint64_t n = std::min<uint64_t>(blocks * lba - skip, end - byte);
    std::memcpy(dst, static_cast<const uint8_t*>(bounce.host()) + skip, n);
    dst += n;
    byte += n;
  }
}

}  // namespace gpunvme::llm
