#include "examples/llm/engine/model_on_device.h"

#include <algorithm>
#include <stdexcept>

#include "host/device_lock.h"
#include "host/open_device.h"
#include "host/text/escape.h"
#include "runtime/io/cpu_block_io.h"
#include "runtime/model/checked_header.h"
#include "runtime/model/tensor_names.h"

namespace gpunvme::llm {

ModelOnDevice open_model(host::Controller& c, host::CpuIo& io) {
  const NamespaceIo one{&c, &io};
  return open_model(std::span<const NamespaceIo>(&one, 1));
}

ModelOnDevice open_model(std::span<const NamespaceIo> members) {
  if (members.empty()) throw std::runtime_error("no device given");
  ModelOnDevice m;
  std::vector<model::BlockIo> ios;
  for (const NamespaceIo& n : members) ios.push_back(model::cpu_block_io(*n.controller, *n.io, n.controller->transport().name()));
  if (members.size() == 1 && !model::is_stripe_member(ios[0])) {
    m.io = ios[0];  // one namespace (a lone set member is refused by detect_model, naming the set)
  } else {
    m.set = std::make_unique<model::StripeSet>(std::move(ios));
    m.stripe = m.set->geometry();
    m.io = m.set->logical();
  }
  for (const NamespaceIo& n : members) m.device_args += (m.device_args.empty() ? "--device " : " --device ") + n.controller->transport().name();
  m.members.assign(members.begin(), members.end());
  m.detected = model::detect_model(m.io);
  model::CheckedHeader h = model::read_checked_header(m.io, m.detected, m.device_args);
  m.file = std::make_unique<gguf::GgufFile>(std::move(h.file));
  m.header_chunks = std::move(h.verified_chunks);
  m.header_bytes_checked = h.bytes_checked;
  m.header_check_seconds = h.seconds;
  m.map = std::make_unique<model::LbaMap>(*m.file, m.io.lba_size, m.detected.start_lba);
  m.config = read_config(*m.file);
  m.weights = map_weights(*m.file, m.config);
  m.vocab = read_vocab(*m.file);
  // Token ids index the embedding table and the output head: a vocabulary of another size belongs to
  // another model (llama.cpp refuses it at load too, as a tensor of the wrong shape).
  if (m.vocab.model != "none" && m.vocab.size() != m.config.n_vocab)
    throw std::runtime_error("the model's vocabulary has " + std::to_string(m.vocab.size()) +
                             " tokens (tokenizer.ggml.tokens) but its embedding table token_embd.weight has " +
                             std::to_string(m.config.n_vocab) +
                             " rows: the tokenizer and the weights do not belong together; convert the model again");
  const uint64_t end = m.device_byte(m.file->data_end());
  if (end > m.io.capacity_bytes())
    throw std::runtime_error("the model's tensors run past the end of the namespace: the device holds a truncated copy; deploy it again");
  return m;
}

struct DeviceSet::Member {
  host::DeviceLock lock;
  std::unique_ptr<host::Controller> ctrl;
  std::unique_ptr<host::QueuePair> qp;
  std::unique_ptr<host::CpuIo> io;
  std::string device;
};

DeviceSet::DeviceSet(const std::vector<std::string>& devices, host::Access access) {
  if (devices.empty()) throw std::runtime_error("no --device given");
  // Locked in host::lock_order, kept in the order given (member i is the set's member i).
  members_.resize(devices.size());
  for (const size_t i : host::lock_order(devices, 1)) {
    const std::string& d = devices[i];
    Member& m = *(members_[i] = std::make_unique<Member>());
    m.device = d;
    // A reader's shared lock for the whole run: a deploy cannot rewrite the model under the engine.
    m.lock = host::DeviceLock::acquire(d, 1, access == host::Access::kReadOnly ? host::LockMode::kShared : host::LockMode::kExclusive);
    m.ctrl = host::open_controller(d, {}, access);
    m.qp = m.ctrl->create_io_queue_pair(1, std::min<uint32_t>(256, m.ctrl->max_queue_entries()));
    m.io = std::make_unique<host::CpuIo>(*m.ctrl, *m.qp, 1);
  }
}

DeviceSet::~DeviceSet() = default;

host::Controller& DeviceSet::controller(size_t i) { return *members_.at(i)->ctrl; }

std::vector<NamespaceIo> DeviceSet::namespaces() {
  std::vector<NamespaceIo> v;
  for (auto& m : members_) v.push_back({m->ctrl.get(), m->io.get()});
  return v;
}

std::vector<host::Controller*> DeviceSet::controllers() {
  std::vector<host::Controller*> v;
  for (auto& m : members_) v.push_back(m->ctrl.get());
  return v;
}

std::string DeviceSet::describe() const {
  std::string s;
  for (const auto& m : members_) s += (s.empty() ? "" : " + ") + m->device;
  return s;
}

PackedRanges dense_part(const ModelOnDevice& m, const LayerWeights& l) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const model::TensorExtent& te : m.map->tensors()) {
    const uint64_t off = te.tensor->file_offset;
    if (off < l.begin || off >= l.end) continue;
    if (m.config.is_moe() && model::parse_expert_name(te.tensor->name)) continue;
    ranges.emplace_back(off, off + te.extent.byte_length);
  }
  PackedRanges p = PackedRanges::pack(std::move(ranges));
  if (p.pieces.empty()) throw std::runtime_error("layer " + std::to_string(l.index) + " has no dense tensors");
  return p;
}

std::vector<LayerBytes> layer_bytes(const ModelOnDevice& m) {
  std::vector<LayerBytes> out;
  for (const LayerWeights& l : m.weights.layers) {
    LayerBytes b{.dense = dense_part(m, l).bytes};
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
  if (src.read(file_offset, dst, len) != len) throw std::runtime_error(past_end_message(file_offset, len));
}

std::string past_end_message(uint64_t file_offset, uint64_t len) {
  return "model bytes " + std::to_string(file_offset) + ".." + std::to_string(file_offset + len) +
         " lie past the model's end on the device";
}

std::string bytes_hold(const ModelOnDevice& m, uint64_t begin, uint64_t end) {
  std::vector<std::string> held;
  if (begin < m.file->data_offset()) held.push_back("the GGUF header");
  for (const gguf::TensorInfo& t : m.file->tensors())
    if (t.file_offset < end && t.file_end() > begin && t.size_bytes) held.push_back(text::printable(t.name));
  std::string what;
  for (size_t i = 0; i < held.size() && i < 4; ++i) what += (i ? ", " : "") + held[i];
  if (held.size() > 4) what += " and " + std::to_string(held.size() - 4) + " more tensors";
  if (held.empty()) what = "no tensor (padding between tensors or after the last)";
  return what;
}

}  // namespace gpunvme::llm
