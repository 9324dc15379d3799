#include "examples/llm/engine/trace.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "examples/llm/engine/sampler.h"

namespace gpunvme::llm {
namespace {

std::FILE* open_or_throw(const std::string& path, const char* what) {
  if (path.empty()) return nullptr;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error(std::string(what) + " " + path + ": " + std::strerror(errno));
  return f;
}

}  // namespace

Trace::Trace(const std::string& json_path, const std::string& logits_path, uint32_t top) : top_(top) {
  json_ = open_or_throw(json_path, "--trace");
  try {
    raw_ = open_or_throw(logits_path, "--logits-out");
  } catch (...) {
    if (json_) std::fclose(json_);
    throw;
  }
}

Trace::~Trace() {
  if (json_) std::fclose(json_);
  if (raw_) std::fclose(raw_);
}

void Trace::token(uint32_t id, std::span<const float> logits) {
  if (raw_ && std::fwrite(logits.data(), sizeof(float), logits.size(), raw_) != logits.size())
    throw std::runtime_error("--logits-out: write failed");
  if (json_) {
    const uint32_t k = std::min<uint32_t>(top_, uint32_t(logits.size()));
    const std::vector<uint32_t> idx = top_k(logits, k);
    std::fprintf(json_, "{\"step\": %u, \"token\": %u, \"top\": [", step_, id);
    for (uint32_t i = 0; i < k; ++i) std::fprintf(json_, "%s[%u, %.9g]", i ? ", " : "", idx[i], double(logits[idx[i]]));
    std::fprintf(json_, "]}\n");
    std::fflush(json_);
  }
  ++step_;
}

}  // namespace gpunvme::llm
