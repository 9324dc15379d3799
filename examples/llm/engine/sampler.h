// Picking the next token from the logits: greedy (temperature 0, the default and what the reference
// tests use), or temperature + top-k sampling with a seeded generator (the same seed, the same text).
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace gpunvme::llm {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy
  uint32_t top_k = 40;       // with temperature > 0: sample among the k most likely; 0: all (llama.cpp's k <= 0)
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplerOptions o) : o_(o), rng_(o.seed) {}
  uint32_t pick(std::span<const float> logits);

 private:
  SamplerOptions o_;
  std::mt19937_64 rng_;
};

// Index of the largest logit; the lowest index on a tie (llama.cpp's greedy sampler does the same).
uint32_t argmax(std::span<const float> logits);

// The indices of the k largest logits, largest first, the lower index first on a tie (k <= size).
std::vector<uint32_t> top_k(std::span<const float> logits, uint32_t k);

}  // namespace gpunvme::llm
