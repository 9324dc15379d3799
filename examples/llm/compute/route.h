// MoE routing, decided once for the CPU and the GPU: softmax over a router's logits, the top k (the
// lowest id first on a tie), the k weights renormalised to sum 1 (Mixtral's and qwen3moe's gating,
// llama.cpp's build_moe_ffn with softmax gating and weight normalisation). The CPU backend runs it on
// one lane (cpu_forward.cpp); the GPU routing kernels (gpu_route.cu) on one thread or on a warp, so a
// routing and its pre-gated prediction are the same function on every path.
#pragma once
#include <cmath>
#include <cstdint>

#include "driver/compiler.h"

namespace gpunvme::llm {

// The largest n_expert routed (model/config.cpp refuses more): the selection's bitmap and the GPU
// kernels' shared scratch are sized by it.
inline constexpr uint32_t kMaxRoutedExperts = 256;

// The lanes that route one token together. One lane: every reduction is the lane's own value. The GPU
// kernel's warp (gpu_route.cu) has the same members over 32 lanes.
struct OneLane {
  GPUNVME_HD uint32_t lane() const { return 0; }
  GPUNVME_HD uint32_t size() const { return 1; }
  GPUNVME_HD float max(float x) const { return x; }        // the largest x of all lanes (fmaxf)
  GPUNVME_HD float from_first(float x) const { return x; }  // lane 0's x, on every lane
  // The larger p of all lanes and its id; on equal p the lower id.
  GPUNVME_HD void keep_best(float& /*p*/, uint32_t& /*id*/) const {}
  GPUNVME_HD void sync() const {}
};

// Routes one token: ids[0..k) receive the experts, best first, weights[0..k) their weights. `p` is
// scratch of n_expert floats that every lane sees (the probabilities). The values, step by step:
//   mx   the largest logit (fmaxf: exact and order-free, NaN ignored);
//   sum  lane 0 adds the exponentials in expert order;
//   p    each expert's expf(logit - mx) / sum;
//   pick each lane keeps the first strict maximum of its own experts (ascending); the lanes keep the
//        larger p and, on equal p, the lower id: a one-lane scan's first strict maximum, whatever the
//        number of lanes, so every lane count gives the same bits. No expert with p > -1 left (NaN)
//        gives id 0 and weight -1.
template <class Lanes>
GPUNVME_HD void route_top_k(const Lanes& g, const float* logits, uint32_t n_expert, uint32_t k, float* p, uint32_t* ids,
                            float* weights) {
  const uint32_t lane = g.lane(), step = g.size();
  float mx = -INFINITY;
  for (uint32_t e = lane; e < n_expert; e += step) mx = fmaxf(mx, logits[e]);
  mx = g.max(mx);
  for (uint32_t e = lane; e < n_expert; e += step) p[e] = expf(logits[e] - mx);
  g.sync();
  float sum = 0.0f;
  if (lane == 0)
    for (uint32_t e = 0; e < n_expert; ++e) sum += p[e];
  sum = g.from_first(sum);
  g.sync();  // lane 0 has read every p before any lane overwrites its own
  for (uint32_t e = lane; e < n_expert; e += step) p[e] = expf(logits[e] - mx) / sum;
  g.sync();
  uint64_t taken[kMaxRoutedExperts / 64] = {};
  float wsum = 0.0f;
  for (uint32_t j = 0; j < k; ++j) {
    uint32_t best = UINT32_MAX;
    float bp = -1.0f;
    for (uint32_t e = lane; e < n_expert; e += step) {
      if (taken[e / 64] >> (e % 64) & 1) continue;
      if (p[e] > bp) {
        bp = p[e];
        best = e;
      }
    }
    g.keep_best(bp, best);
    if (best == UINT32_MAX) best = 0;  // nothing above -1
    taken[best / 64] |= 1ull << (best % 64);
    if (lane == 0) {
      ids[j] = best;
      weights[j] = bp;
    }
    wsum += bp;
  }
  g.sync();
  if (lane == 0)
    for (uint32_t j = 0; j < k; ++j) weights[j] /= wsum;
}

}  // namespace gpunvme::llm
