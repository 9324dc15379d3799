// One token's MoE FFN with every expert in GPU memory in three launches (issue 36): x += the routed
// experts' FFN of x's RMS norm.
//
// Why: the token path ran it as ten launches a layer (the norm, the router's product, the routing, the
// selected experts' gate and up, the GLU, their down, the weighted sum, a copy and the residual add),
// each a few microseconds of mostly latency: Qwen3-30B-A3B's 48 layers read 1.76 GB a token, 11 % of
// what the card moves, so its decode is bound by the launches' chain, not by bytes. Here:
//   1. the norm (every block, as gpu_matvecs_normed computes it), the router's rows, and in the launch's
//      last block to finish the top k (route_top_k on one warp, gpu_route's bits); block 0 also writes
//      the normed vector for the experts;
//   2. the k selected experts' gate and up rows, a warp holding gate row r and up row r of one expert,
//      their biases and the GLU in its epilogue (gpu_matvec_glu's way, over the selected matrices);
//   3. the k experts' down rows: a warp per output row takes its k experts' rows (their GLU outputs all
//      staged in shared memory), adds the k results in routing order and the sum into x.
// Each value is the one the separate kernels computed (the same row sums, `+ 0.0f`, bias adds, GLU,
// weighted sum and add, in the same order), so the fused token has the unfused token's bits, and those
// of a pass of several tokens (tests/gpu/test_llm_ops.cpp holds them equal). Experts whose types take
// 8-bit x (gpu_matmul.h) take it in 2 and 3 too (their vectors quantised as the selected products do);
// a router of such a type declines the fusion.
#pragma once
#include <cstdint>

#include "examples/llm/compute/gpu_matmul.h"
#include "examples/llm/model/config.h"

namespace gpunvme::llm {

// A layer's expert stacks in VRAM: each GpuMatrix is expert 0's matrix of its stack (sel null, mat_bytes
// the stride to the next expert); the biases (F32, [n_expert][rows]) are null where the model has none.
// (Also the grouped path's, gpu_moe_grouped.h.)
struct ExpertStacks {
  GpuMatrix router;
  const float* router_bias = nullptr;
  GpuMatrix gate, up, down;
  const float *gate_bias = nullptr, *up_bias = nullptr, *down_bias = nullptr;
};

// Device scratch of one token's fused MoE. The counter starts at 0 and each launch leaves it at 0 (a
// CUDA graph replays the launches as they are).
struct MoeTokenScratch {
  float* xn = nullptr;           // n_embd: x's norm
  float* logits = nullptr;       // n_expert
  uint32_t* routes = nullptr;    // k ids, then k weights (floats)
  float* hidden = nullptr;       // k x n_ff: the GLU's outputs
  uint32_t* router_done = nullptr;  // the router's launch's counter of finished blocks
};

// x (n_embd floats, device memory) += the MoE FFN of x's RMS norm times norm_w (eps), k experts routed by
// `gating`, GLU `act`, enqueued on s. False, enqueuing nothing, where a launch cannot take the shapes
// (gate and up of different types or shapes, a vector too wide for shared memory, the k GLU outputs too
// many for it, more experts than routing takes): the caller then runs the operations apart.
bool gpu_moe_token(gpu_stream_t s, const ExpertStacks& w, const float* norm_w, float eps, uint32_t k, Gating gating, FfnAct act,
                   float* x, const MoeTokenScratch& m);

}  // namespace gpunvme::llm
