// Mixtral-style routing on the GPU: softmax over a router's logits, the top k (the lowest id first on a
// tie, as the CPU executor's stable sort), the k weights renormalised to sum 1. ids[0..k) receive the
// experts, weights[0..k) their weights.
#pragma once
#include <cstdint>

namespace gpunvme::llm {

using gpu_stream_t = struct CUstream_st*;

// The largest n_expert routed (model/config.cpp refuses more).
inline constexpr uint32_t kMaxRoutedExperts = 256;

// One warp: each lane scans a strided share of the experts, the warp reduces. Every value is computed
// by the same expressions in the same order as gpu_route_serial, so the ids and weights have its bits.
void gpu_route(gpu_stream_t s, const float* logits, uint32_t n_expert, uint32_t k, uint32_t* ids, float* weights);

// One thread, expert by expert: the definition gpu_route is held to (tests/gpu/test_llm_route.cpp).
void gpu_route_serial(gpu_stream_t s, const float* logits, uint32_t n_expert, uint32_t k, uint32_t* ids, float* weights);

}  // namespace gpunvme::llm
