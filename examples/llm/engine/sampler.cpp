#include "examples/llm/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace gpunvme::llm {

// The first index of the largest value, in two passes: eight independent running maxima, then the
// first index holding theirs. Why not one loop keeping the index: each step then loads
// logits[best] and compares, a chain of dependent loads at ~6 ns a logit (1.6 ms a token for a 262k
// vocabulary, more than the GPU's whole token on small models). A NaN never compares greater, so it is
// skipped as before; a NaN first makes the answer 0, as before.
uint32_t argmax(std::span<const float> logits) {
  const size_t n = logits.size();
  if (n == 0) return 0;
  constexpr size_t kLanes = 8;
  float m[kLanes];
  for (float& v : m) v = logits[0];
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) m[j] = logits[i + j] > m[j] ? logits[i + j] : m[j];
  float best = m[0];
  for (size_t j = 1; j < kLanes; ++j) best = m[j] > best ? m[j] : best;
  for (; i < n; ++i) best = logits[i] > best ? logits[i] : best;
  for (i = 0; i < n; ++i)
    if (logits[i] == best) return uint32_t(i);
  return 0;  // best is NaN: logits[0] was
}

// Every logit is read anyway to pick a token: checking them costs one pass over a row the host holds.
bool all_finite(std::span<const float> row) {
  return std::all_of(row.begin(), row.end(), [](float x) { return std::isfinite(x); });
}

GreedyPick greedy_pick(std::span<const float> logits) {
  return {argmax(logits), all_finite(logits) ? 0u : 1u};
}

std::vector<uint32_t> top_k(std::span<const float> logits, uint32_t k) {
  std::vector<uint32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0u);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](uint32_t a, uint32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  idx.resize(k);
  return idx;
}

uint32_t top_p_count(std::span<const float> logits, std::span<const uint32_t> sorted, float p) {
  const uint32_t n = uint32_t(sorted.size());
  if (p >= 1.0f || n == 0) return n;
  // llama.cpp's rule: the probabilities are those of the candidates top-k left (its top-p runs after
  // top-k and before temperature), and the cut is after the first token where the sum reaches p.
  std::vector<double> e(n);
  double sum = 0;
  for (uint32_t i = 0; i < n; ++i) sum += e[i] = std::exp(double(logits[sorted[i]] - logits[sorted[0]]));
  double cum = 0;
  for (uint32_t i = 0; i < n; ++i)
    if ((cum += e[i] / sum) >= p) return i + 1;
  return n;  // rounding left the sum a hair under p: keep all
}

uint32_t Sampler::pick(std::span<const float> logits) {
  if (o_.temperature <= 0.0f) return argmax(logits);
  // Top-k 0 is no top-k limit, as in llama.cpp (its top-k sampler leaves the candidates alone for k <= 0).
  const uint32_t n = uint32_t(logits.size());
  uint32_t k = o_.top_k == 0 ? n : std::min(o_.top_k, n);
  const std::vector<uint32_t> idx = top_k(logits, k);
  k = top_p_count(logits, idx, o_.top_p);
  std::vector<double> p(k);
  for (uint32_t i = 0; i < k; ++i) p[i] = std::exp(double(logits[idx[i]] - logits[idx[0]]) / o_.temperature);
  std::discrete_distribution<uint32_t> d(p.begin(), p.end());
  return idx[d(rng_)];
}

}  // namespace gpunvme::llm
