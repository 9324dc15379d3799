// The architectures' table: one row per file of this folder.
#include "examples/llm/arch/arch.h"

#include <cmath>
#include <stdexcept>

namespace gpunvme::llm {

extern const ArchRules kLlamaRules, kQwen2Rules, kGemma3Rules, kQwen3Rules, kQwen3MoeRules, kGptOssRules;

namespace {
const ArchRules* const kArchitectures[] = {&kLlamaRules, &kQwen2Rules, &kGemma3Rules, &kQwen3Rules, &kQwen3MoeRules,
                                          &kGptOssRules};
}  // namespace

std::span<const ArchRules* const> all_architectures() { return kArchitectures; }

const ArchRules* find_architecture(std::string_view name) {
  for (const ArchRules* a : kArchitectures)
    if (name == a->name) return a;
  return nullptr;
}

uint32_t KeyReader::u32(const std::string& key) const {
  const gguf::Value* v = md.find(prefix + key);
  if (!v) throw std::runtime_error("model metadata has no " + prefix + key + " (is this a complete " + prefix.substr(0, prefix.size() - 1) + " GGUF?)");
  const uint64_t x = v->as_uint();
  if (x == 0 || x > UINT32_MAX) throw std::runtime_error(prefix + key + " = " + std::to_string(x) + " is out of range");
  return uint32_t(x);
}

uint32_t KeyReader::u32_or(const std::string& key, uint32_t dflt) const { return has(key) ? u32(key) : dflt; }

float KeyReader::f32_or(const std::string& key, float dflt) const {
  const gguf::Value* v = md.find(prefix + key);
  if (!v) return dflt;
  const float x = v->as<float>();
  if (!std::isfinite(x) || x <= 0) throw std::runtime_error(prefix + key + " must be a positive number");
  return x;
}

}  // namespace gpunvme::llm
