// Namespaces whose bytes are computed on read ("emu:gen,KEY=VALUE,..."): served like any namespace
// (queues, pacing by the drive model, faults), read-only (writes complete with Namespace Is Write
// Protected). What computes the bytes is not the emulator's business: a program that links a generator
// registers it before main (examples/llm/tools/emu_gen.cpp: a generated model with its deploy record,
// so a model larger than RAM can be streamed); in a program without one, emu:gen is refused by name.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gpunvme::emu {

// The bytes of a generated namespace.
class GeneratedBytes {
 public:
  virtual ~GeneratedBytes() = default;
  // Bytes [offset, offset + len) of the namespace (the caller keeps inside it). Called from every
  // controller thread at once: no state changes.
  virtual void read(uint64_t offset, void* dst, size_t len) const = 0;
};

// The device string's keys for the generator, in order ("shape" -> "tiny", ...).
using GenKeys = std::vector<std::pair<std::string, std::string>>;

struct Generator {
  std::vector<std::string> keys;  // the keys it takes besides the controller's and the drive's
  std::string help;               // its keys for the grammar's messages, e.g. "shape=NAME, type=q4_k|q6_k"
  // The namespace's size in bytes (a whole number of blocks), quickly; throws std::invalid_argument
  // naming a missing or bad key.
  std::function<uint64_t(const GenKeys&, uint32_t lba_bytes)> size;
  // The bytes; may take a while (a deploy record's checksums) and may share them with earlier opens.
  std::function<std::shared_ptr<const GeneratedBytes>(const GenKeys&, uint32_t lba_bytes)> open;
};

// One generator per program; registering a second throws std::logic_error. Returns true, so that a
// namespace-scope constant can register it before main.
bool register_generator(Generator g);
// Null when the program has none.
const Generator* registered_generator();

}  // namespace gpunvme::emu
