// Routing on the GPU: compute/route.h's route_top_k (the CPU backend's routing) as a kernel, for one
// token's logits in device memory. ids[0..k) receive the experts, weights[0..k) their weights.
#pragma once
#include <cstdint>

#include "examples/llm/compute/route.h"

namespace gpunvme::llm {

using gpu_stream_t = struct CUstream_st*;

// One warp: each lane scans a strided share of the experts, the warp reduces (route_top_k says why the
// ids and weights have gpu_route_serial's bits).
void gpu_route(gpu_stream_t s, const float* logits, uint32_t n_expert, uint32_t k, uint32_t* ids, float* weights,
               Gating gating = Gating::kSoftmax);

// n tokens in one launch, a warp each, each with gpu_route's bits: token t's logits at logits + t *
// n_expert; its k ids at routes + t * 2k and its k weights (floats) right after them, the layout of one
// token's routing in GpuForward.
void gpu_route_tokens(gpu_stream_t s, const float* logits, uint32_t n, uint32_t n_expert, uint32_t k, uint32_t* routes,
                      Gating gating = Gating::kSoftmax);

// One thread, expert by expert, as the CPU: the definition gpu_route is held to (tests/gpu/test_llm_route.cpp).
void gpu_route_serial(gpu_stream_t s, const float* logits, uint32_t n_expert, uint32_t k, uint32_t* ids, float* weights,
                      Gating gating = Gating::kSoftmax);

}  // namespace gpunvme::llm
