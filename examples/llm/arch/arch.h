// The architectures the engine runs, one file each in this folder (llama.cpp's src/models/*.cpp in
// spirit): an architecture's rules turn its GGUF keys into the ModelConfig that the one transformer
// block (compute/block.h) reads, so a model's differences are data, decided here once for the CPU
// and the GPU. Adding an architecture: one file here with its ArchRules, one row in table.cpp, and
// its name in model/config.h's Arch.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "examples/llm/model/config.h"
#include "runtime/gguf/gguf_file.h"

namespace gpunvme::llm {

// An architecture's metadata keys (<arch>.<key>), each refused with a message that names it.
struct KeyReader {
  const gguf::Metadata& md;
  std::string prefix;  // "<arch>."

  bool has(const std::string& key) const { return md.contains(prefix + key); }
  uint32_t u32(const std::string& key) const;                  // present, 1 .. UINT32_MAX
  uint32_t u32_or(const std::string& key, uint32_t dflt) const;
  float f32_or(const std::string& key, float dflt) const;      // finite and positive
};

struct ArchRules {
  const char* name;     // general.architecture
  Arch arch;
  const char* summary;  // how supported_architectures() names it
  // After the shared keys are read (shapes, eps, RoPE base, expert counts where the key is present):
  // the architecture's RoPE layout, window, norms, activation and keys of its own.
  void (*apply)(ModelConfig& c, const KeyReader& r);
  // llama.cpp lets rope.dimension_count be below the head size (the rest of each head unrotated).
  bool partial_rotary = false;
};

// Every architecture, in the order supported_architectures() lists them.
std::span<const ArchRules* const> all_architectures();
// The rules of general.architecture `name`, or null.
const ArchRules* find_architecture(std::string_view name);

}  // namespace gpunvme::llm
