// Picking the next token from the logits: greedy (temperature 0, the default and what the reference
// tests use), or sampling with a seeded generator (the same seed, the same text) in llama.cpp's chain
// order: top-k, then top-p (nucleus) on the probabilities of the logits as they are, then temperature,
// then a draw.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "examples/llm/compute/greedy_pick.h"

namespace gpunvme::llm {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy
  uint32_t top_k = 40;       // with temperature > 0: sample among the k most likely; 0: all (llama.cpp's k <= 0)
  float top_p = 1.0f;        // then keep the fewest most likely whose probabilities sum to >= top_p; >= 1: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplerOptions o) : o_(o), rng_(o.seed) {}
  uint32_t pick(std::span<const float> logits);
  // Temperature 0: pick() is argmax, which an executor may compute where the logits are (Executor::pass_greedy).
  bool greedy() const { return o_.temperature <= 0.0f; }

 private:
  SamplerOptions o_;
  std::mt19937_64 rng_;
};

// Index of the largest logit; the lowest index on a tie (llama.cpp's greedy sampler does the same).
uint32_t argmax(std::span<const float> logits);
// argmax and whether every logit is finite: the host's greedy pick (greedy_pick.h's rule, which the
// GPU's kernel is held to).
GreedyPick greedy_pick(std::span<const float> logits);
// No NaN or Inf in the row (what generate(), the Scheduler and greedy_pick check before picking from it).
bool all_finite(std::span<const float> row);

// The indices of the k largest logits, largest first, the lower index first on a tie (k <= size).
std::vector<uint32_t> top_k(std::span<const float> logits, uint32_t k);

// How many of `sorted` (indices of logits, largest first) top-p keeps: the shortest prefix whose
// softmax probabilities (over `sorted` only, temperature 1) sum to >= p, at least one; all for p >= 1.
uint32_t top_p_count(std::span<const float> logits, std::span<const uint32_t> sorted, float p);

}  // namespace gpunvme::llm
