// The model as the engine finds it: on the device alone (a deploy record or a dd'ed GGUF, as
// `gpunvme ls` finds it), its header read through the driver, the tensor -> LBA map, the engine's
// configuration, weight map and vocabulary. Nothing here reads tensor data.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "examples/llm/engine/residency_plan.h"
#include "examples/llm/model/packed_ranges.h"
#include "examples/llm/model/weights.h"
#include "examples/llm/tokenizer/vocab.h"
#include "host/controller.h"
#include "host/cpu_io.h"
#include "host/open_device.h"
#include "runtime/model/detect.h"
#include "runtime/model/lba_map.h"
#include "runtime/model/stripe.h"

namespace gpunvme::llm {

// A namespace the model lies on (or a striped set's member): its controller and its CPU queue.
struct NamespaceIo {
  host::Controller* controller = nullptr;
  host::CpuIo* io = nullptr;
};

struct ModelOnDevice {
  // One namespace, or a striped set's logical volume (model/stripe.h): every LBA below (detected,
  // map) is then a logical one, and `stripe` says how it is laid over the members.
  model::BlockIo io;  // whole-block reads through the CPU queue(s) (runtime/io/cpu_block_io.h)
  std::optional<model::StripeGeometry> stripe;
  std::unique_ptr<model::StripeSet> set;  // the members' records checked; io reads through it
  model::DetectedModel detected;
  std::unique_ptr<gguf::GgufFile> file;
  std::unique_ptr<model::LbaMap> map;
  ModelConfig config;
  ModelWeights weights;
  Vocab vocab;
  // The open check (runtime/model/checked_header.h), done whatever --no-verify says: with a deploy
  // record, the chunks holding the header, metadata and tensor table, read whole and matched.
  std::vector<uint64_t> header_chunks;
  uint64_t header_bytes_checked = 0;
  double header_check_seconds = 0;
  std::string device_args;  // "--device A [--device B ...]": how a fix names the device(s)
  // The namespaces in order (one, or the set's members): the start's reader opens queues of its own
  // on their controllers (model_reader.h). Valid while what open_model was given lives.
  std::vector<NamespaceIo> members;

  uint32_t lba_size() const { return map->lba_size(); }
  // Byte offset on the namespace of the model file's byte `file_offset`.
  uint64_t device_byte(uint64_t file_offset) const { return map->start_lba() * lba_size() + file_offset; }
};

// Finds and checks the model; `io` must outlive the result (its block reads go through it). Throws std::runtime_error with what is wrong and what to do (no model on
// the device, an unfinished deploy, an unsupported architecture, a missing tensor...).
ModelOnDevice open_model(host::Controller& c, host::CpuIo& io);
// The same on a striped set: its members in order, each with a CPU queue (clear errors for members in
// the wrong order, missing, twice, of another set, or not members: model/stripe.h). One member that is
// no set member is the one-namespace case.
ModelOnDevice open_model(std::span<const NamespaceIo> members);

// The namespaces a model lives on, opened for reading: one, or a striped set's members in order
// (repeated --device), each with a reader's lock, its controller and one CPU queue (qid 1).
class DeviceSet {
 public:
  explicit DeviceSet(const std::vector<std::string>& devices, host::Access access = host::Access::kReadOnly);
  ~DeviceSet();
  DeviceSet(const DeviceSet&) = delete;
  DeviceSet& operator=(const DeviceSet&) = delete;
  size_t size() const { return members_.size(); }
  host::Controller& controller(size_t i);
  std::vector<NamespaceIo> namespaces();
  std::vector<host::Controller*> controllers();
  std::string describe() const;  // the device strings, " + "-joined

 private:
  struct Member;
  std::vector<std::unique_ptr<Member>> members_;  // heap: each keeps its address
};

// The bytes of a layer read every token: every tensor but the routed experts (for a dense model: the
// whole layer), as the pieces of the file they occupy (packed_ranges.h).
PackedRanges dense_part(const ModelOnDevice& m, const LayerWeights& l);
// What the residency plan needs to know of every layer (dense_part's buffer; the experts' bytes).
std::vector<LayerBytes> layer_bytes(const ModelOnDevice& m);

// Reads bytes [file_offset, file_offset + len) of the model into `dst` through the CPU queue, one
// command at a time (small reads: finite_weights.h, tests): model::DeviceByteSource over m.io. The
// start's loads go through model_reader.h. Throws when the device holds fewer bytes.
void read_model_bytes(const ModelOnDevice& m, uint64_t file_offset, uint64_t len, uint8_t* dst);
// "model bytes A..B lie past the model's end on the device": for [file_offset, file_offset + len).
std::string past_end_message(uint64_t file_offset, uint64_t len);
// What model bytes [begin, end) hold, for messages: "the GGUF header", up to four tensor names ("and N
// more tensors"), or "no tensor (padding between tensors or after the last)".
std::string bytes_hold(const ModelOnDevice& m, uint64_t begin, uint64_t end);

}  // namespace gpunvme::llm
