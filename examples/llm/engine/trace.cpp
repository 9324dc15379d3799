#include "examples/llm/engine/trace.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "examples/llm/engine/sampler.h"

namespace gpunvme::llm {

Trace::Trace(guard::OutputFile json, guard::OutputFile logits, uint32_t top)
    : json_(std::move(json)), raw_(std::move(logits)), top_(top) {}

void Trace::token(uint32_t id, std::span<const float> logits) {
  if (raw_) raw_.write(logits.data(), logits.size_bytes());
  if (json_) {
    const uint32_t k = std::min<uint32_t>(top_, uint32_t(logits.size()));
    const std::vector<uint32_t> idx = top_k(logits, k);
    std::fprintf(json_.stream(), "{\"step\": %u, \"token\": %u, \"top\": [", step_, id);
    for (uint32_t i = 0; i < k; ++i)
      std::fprintf(json_.stream(), "%s[%u, %.9g]", i ? ", " : "", idx[i], double(logits[idx[i]]));
    std::fprintf(json_.stream(), "]}\n");
    json_.flush();  // a failing output stops the run at its first token
  }
  ++step_;
}

void Trace::commit() {
  if (json_) json_.commit();
  if (raw_) raw_.commit();
}

}  // namespace gpunvme::llm
