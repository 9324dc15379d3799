#include "examples/llm/engine/model_on_device.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/io/cpu_block_io.h"
#include "runtime/model/tensor_names.h"

namespace gpunvme::llm {

ModelOnDevice open_model(host::Controller& c, host::CpuIo& io) {
  ModelOnDevice m;
  m.io = model::cpu_block_io(c, io, c.transport().name());
  m.detected = model::detect_model(m.io);
  m.file = std::make_unique<gguf::GgufFile>(model::read_model_header(m.io, m.detected));
  m.map = std::make_unique<model::LbaMap>(*m.file, io.lba_bytes(), m.detected.start_lba);
  m.config = read_config(*m.file);
  m.weights = map_weights(*m.file, m.config);
  m.vocab = read_vocab(*m.file);
  const uint64_t end = m.device_byte(m.file->data_end());
  if (end > io.blocks() * uint64_t(io.lba_bytes()))
    throw std::runtime_error("the model's tensors run past the end of the namespace: the device holds a truncated copy; deploy it again");
  return m;
}

ByteRange dense_range(const ModelOnDevice& m, const LayerWeights& l) {
  ByteRange r{l.end, l.begin};
  for (const model::TensorExtent& te : m.map->tensors()) {
    const uint64_t off = te.tensor->file_offset;
    if (off < l.begin || off >= l.end) continue;
    if (m.config.is_moe() && model::parse_expert_name(te.tensor->name)) continue;
    r.begin = std::min(r.begin, off);
    r.end = std::max(r.end, off + te.extent.byte_length);
  }
  if (r.begin >= r.end) throw std::runtime_error("layer " + std::to_string(l.index) + " has no dense tensors");
  return r;
}

std::vector<LayerBytes> layer_bytes(const ModelOnDevice& m) {
  std::vector<LayerBytes> out;
  for (const LayerWeights& l : m.weights.layers) {
    LayerBytes b{.dense = dense_range(m, l).bytes()};
    if (m.config.is_moe()) {
      b.experts = l.gate_exps.bytes + l.up_exps.bytes + l.down_exps.bytes;
      b.n_expert = m.config.n_expert;
      b.n_used = m.config.n_expert_used;
    }
    out.push_back(b);
  }
  return out;
}

void read_model_bytes(const ModelOnDevice& m, uint64_t file_offset, uint64_t len, uint8_t* dst) {
  model::DeviceByteSource src(m.io, m.map->start_lba(), m.file->data_end());
  if (src.read(file_offset, dst, len) != len)
    throw std::runtime_error("model bytes " + std::to_string(file_offset) + ".." + std::to_string(file_offset + len) +
                             " lie past the model's end on the device");
}

}  // namespace gpunvme::llm
