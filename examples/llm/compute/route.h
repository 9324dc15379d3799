// MoE routing, decided once for the CPU and the GPU: softmax over a router's logits, the top k (the
// lowest id first on a tie), the k weights renormalised to sum 1 (Mixtral's and qwen3moe's gating,
// llama.cpp's build_moe_ffn with softmax gating and weight normalisation); or, Gating::kSoftmaxSelected,
// the top k of the raw logits and a softmax over those k (gpt-oss: LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT,
// build_moe_ffn's probs = logits, then ggml_soft_max over the selected weights). The CPU backend runs it on
// one lane (cpu_forward.cpp); the GPU routing kernels (gpu_route.cu) on one thread or on a warp, so a
// routing and its pre-gated prediction are the same function on every path.
#pragma once
#include <cmath>
#include <cstdint>

#include "driver/compiler.h"
#include "examples/llm/model/config.h"

namespace gpunvme::llm {

// The largest n_expert routed (model/config.cpp refuses more): the selection's bitmap and the GPU
// kernels' shared scratch are sized by it.
inline constexpr uint32_t kMaxRoutedExperts = 256;

// The lanes that route one token together. One lane: every reduction is the lane's own value. The GPU
// kernel's warp (gpu_route_lanes.cuh's WarpLanes) has the same members over 32 lanes. kSize is constant so
// that a lane's share of the experts is an array of fixed size (route_top_k): in registers on the GPU.
struct OneLane {
  static constexpr uint32_t kSize = 1;
  GPUNVME_HD uint32_t lane() const { return 0; }
  GPUNVME_HD float max(float x) const { return x; }        // the largest x of all lanes (fmaxf)
  GPUNVME_HD float from_first(float x) const { return x; }  // lane 0's x, on every lane
  // The larger p of all lanes and its id; on equal p the lower id.
  GPUNVME_HD void keep_best(float& /*p*/, uint32_t& /*id*/) const {}
  GPUNVME_HD void sync() const {}
};

// A lane's experts, lane + i * Lanes::kSize for slot i, as many slots as the most experts routed need.
template <class Lanes>
using LaneExperts = float[kMaxRoutedExperts / Lanes::kSize];

// The top k of the lanes' values v (slot i of a lane: expert lane + i * kSize), best first: ids[j] and
// weights[j] on lane 0; returns the sum of the k picks (on every lane). Each lane keeps the first strict
// maximum of its own experts, the lanes the larger and, on equal values, the lower id. A pick is taken
// out by setting its value to -inf, which no floor is below. A pick with nothing above `floor` left (NaN)
// is id 0 with weight `floor`.
template <class Lanes>
GPUNVME_HD float pick_top_k(const Lanes& g, uint32_t n_expert, uint32_t k, LaneExperts<Lanes>& v, float floor, uint32_t* ids,
                            float* weights) {
  constexpr uint32_t kSlots = kMaxRoutedExperts / Lanes::kSize;
  const uint32_t lane = g.lane();
  float wsum = 0.0f;
  for (uint32_t j = 0; j < k; ++j) {
    uint32_t best = UINT32_MAX;
    float bp = floor;
    GPUNVME_UNROLL
    for (uint32_t i = 0; i < kSlots; ++i) {
      const uint32_t e = lane + i * Lanes::kSize;
      if (e < n_expert && v[i] > bp) {
        bp = v[i];
        best = e;
      }
    }
    g.keep_best(bp, best);
    if (best == UINT32_MAX) best = 0;  // nothing above the floor
    GPUNVME_UNROLL
    for (uint32_t i = 0; i < kSlots; ++i)  // a fixed slot each time round: no array indexed at run time
      if (lane + i * Lanes::kSize == best) v[i] = -INFINITY;
    if (lane == 0) {
      ids[j] = best;
      weights[j] = bp;
    }
    wsum += bp;
  }
  return wsum;
}

// Routes one token: ids[0..k) receive the experts, best first, weights[0..k) their weights. `p` is
// scratch of n_expert floats that every lane sees. The values, step by step:
//   mx   the largest logit (fmaxf: exact and order-free, NaN ignored);
//   sum  lane 0 adds the exponentials expf(logit - mx) in expert order;
//   p    each expert's expf(logit - mx) / sum;
//   pick each lane keeps the first strict maximum of its own experts (ascending); the lanes keep the
//        larger p and, on equal p, the lower id: a one-lane scan's first strict maximum, whatever the
//        number of lanes, so every lane count gives the same bits. No expert with p > -1 left (NaN)
//        gives id 0 and weight -1.
// kSoftmaxSelected: p is the logit itself (any expert above -inf can be picked), and the k weights are
// ggml-cpu's soft_max of the picked logits: expf(l - l_best) times 1 / their sum, summed in double.
// Each lane holds its experts' values in a fixed-size array (LaneExperts), read once: a warp routes
// Qwen3-30B-A3B's 128 experts from registers, where the scans of shared memory with a taken-bitmap in
// local memory took most of the routing's 8.7 us a layer on an H200.
template <class Lanes>
GPUNVME_HD void route_top_k(const Lanes& g, const float* logits, uint32_t n_expert, uint32_t k, Gating gating, float* p,
                            uint32_t* ids, float* weights) {
  constexpr uint32_t kSlots = kMaxRoutedExperts / Lanes::kSize;
  const uint32_t lane = g.lane();
  LaneExperts<Lanes> v;
  GPUNVME_UNROLL
  for (uint32_t i = 0; i < kSlots; ++i) {
    const uint32_t e = lane + i * Lanes::kSize;
    v[i] = e < n_expert ? logits[e] : -INFINITY;
  }
  if (gating == Gating::kSoftmaxSelected) {
    pick_top_k(g, n_expert, k, v, -INFINITY, ids, weights);
    if (lane == 0) {
      const float mx = weights[0];  // the best logit: picks come best first
      double sum = 0.0;
      for (uint32_t j = 0; j < k; ++j) sum += double(weights[j] = expf(weights[j] - mx));
      const float inv = float(1.0 / sum);
      for (uint32_t j = 0; j < k; ++j) weights[j] *= inv;
    }
    return;
  }
  float mx = -INFINITY;
  GPUNVME_UNROLL
  for (uint32_t i = 0; i < kSlots; ++i) mx = fmaxf(mx, v[i]);  // the empty slots' -inf change nothing
  mx = g.max(mx);
  GPUNVME_UNROLL
  for (uint32_t i = 0; i < kSlots; ++i) {
    const uint32_t e = lane + i * Lanes::kSize;
    if (e < n_expert) p[e] = v[i] = expf(v[i] - mx);
  }
  g.sync();
  float sum = 0.0f;
  if (lane == 0) {  // in expert order; 8 loads ahead of the adds, which stay one after another
    uint32_t e = 0;
    for (; e + 8 <= n_expert; e += 8) {
      float t[8];
      GPUNVME_UNROLL
      for (uint32_t i = 0; i < 8; ++i) t[i] = p[e + i];
      GPUNVME_UNROLL
      for (uint32_t i = 0; i < 8; ++i) sum += t[i];
    }
    for (; e < n_expert; ++e) sum += p[e];
  }
  sum = g.from_first(sum);
  GPUNVME_UNROLL
  for (uint32_t i = 0; i < kSlots; ++i)
    if (lane + i * Lanes::kSize < n_expert) v[i] = v[i] / sum;
  const float wsum = pick_top_k(g, n_expert, k, v, -1.0f, ids, weights);
  if (lane == 0)
    for (uint32_t j = 0; j < k; ++j) weights[j] /= wsum;
}

}  // namespace gpunvme::llm
