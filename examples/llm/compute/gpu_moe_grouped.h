// A prompt pass's MoE FFN with the layer's experts in VRAM, expert by expert instead of token by token
// (issue 36). Token by token, a 512-token pass over a 128-expert layer is 512 routings and 512 x 7
// launches whose matrix-vector kernels read each routed expert once per token. Grouped: one router
// product for the pass, one routing launch, then each expert's tokens gathered into consecutive rows
// and its three products run once over them, one GLU over every row, and each token's outputs summed in
// its routing order.
//
// The token path's bits, to the bit: every product is the FP32 batched kernel, whose (row, token)
// results are the matrix-vector kernel's (gpu_matmul.h); biases are added after it as the token path
// adds them; the GLU is element by element; the sum is the token path's, in the same order. So streamed
// experts (fetched, token by token) and resident ones (grouped) keep giving the same logits, which the
// reference check's residency pair and tiers hold to the bit. Not the tensor cores: their 16-bit inputs
// would make a resident layer's prompt pass differ from a streamed one's.
//
// Why only passes of more than kSmallPassTokens tokens: below that an expert rarely gets more than one
// row, and the token path's one launch per projection for all k experts is fewer launches. Why not for
// fetched experts: the fetcher reads at most k experts per fetch, and a prompt pass routes to nearly all.
//
// The grouping is made on the host from the routing copied back (one stream wait per MoE layer of a
// prompt pass): the experts' products are launched by the host, which must know each one's row count.
#pragma once
#include <cstdint>
#include <vector>

#include "examples/llm/compute/gpu_matmul.h"
#include "examples/llm/model/config.h"

namespace gpunvme::llm {

// A layer's expert stacks in VRAM: each GpuMatrix is expert 0's matrix of its stack (sel null, mat_bytes
// the stride to the next expert); the biases (F32, [n_expert][rows]) are null where the model has none.
struct ExpertStacks {
  GpuMatrix router;
  const float* router_bias = nullptr;
  GpuMatrix gate, up, down;
  const float *gate_bias = nullptr, *up_bias = nullptr, *down_bias = nullptr;
};

class GroupedMoe {
 public:
  // Buffers for passes of up to max_tokens tokens of config c (an MoE model), on the current device.
  GroupedMoe(const ModelConfig& c, uint32_t max_tokens);
  ~GroupedMoe();
  GroupedMoe(const GroupedMoe&) = delete;
  GroupedMoe& operator=(const GroupedMoe&) = delete;

  // acc[t] = the MoE FFN of the normed token xn[t], t < n, enqueued on `s` (waits for the routing).
  void run(gpu_stream_t s, const ExpertStacks& st, const float* xn, uint32_t n, float* acc);

  uint64_t device_bytes() const { return device_bytes_; }

 private:
  // Host side of the grouping: rows_ (sorted row -> token) and pos_ (token t's j-th expert -> its row),
  // and each expert's first row and row count.
  void group(uint32_t n);

  ModelConfig c_;
  uint32_t max_tokens_;
  uint64_t device_bytes_ = 0;
  float* logits_ = nullptr;                            // [n][n_expert]
  uint32_t *routes_ = nullptr, *routes_host_ = nullptr;  // [n][2k]: k ids, then k weights (floats)
  uint32_t *rows_ = nullptr, *rows_host_ = nullptr;      // [n * k]: pinned host, then device
  uint32_t *pos_ = nullptr;                            // [n][k], device (its host copy after rows_host_)
  float* xs_ = nullptr;    // [n * k][n_embd]: the gathered inputs, then the experts' outputs
  float *g_ = nullptr, *u_ = nullptr;  // [n * k][n_ff]
  std::vector<uint32_t> first_, count_;  // per expert
};

}  // namespace gpunvme::llm
