// A prompt pass's MoE FFN with the layer's experts in VRAM, expert by expert instead of token by token
// (issue 36). Token by token, a 512-token pass over a 128-expert layer is 512 routings and 512 x 7
// launches whose matrix-vector kernels read each routed expert once per token. Grouped: one router
// product for the pass, one routing launch, then each expert's tokens gathered into consecutive rows
// and its three products run once over them, one GLU over every row, and each token's outputs summed in
// its routing order.
//
// The token path's bits, to the bit: every product is the batched kernel of the small passes (FP32, or
// 8-bit x for the types gpu_matmul.h's 8-bit path takes: "the small-pass kernels" below), whose (row,
// token) results are the matrix-vector kernel's; biases are added after it as the token path adds them;
// the GLU is element by element; the sum is the token path's, in the same order. So streamed experts
// (fetched, token by token) and resident ones (grouped) keep giving the same logits, which the reference
// check's residency pair and tiers hold to the bit. Not the tensor cores: their 16-bit inputs
// would make a resident layer's prompt pass differ from a streamed one's.
//
// Why only passes of more than kSmallPassTokens tokens: below that an expert rarely gets more than one
// row, and the token path's one launch per projection for all k experts is fewer launches; except for
// fetched experts with GPUNVME_MOE_GROUP_FETCHED=1 (several sequences' decode: each expert fetched once
// for the pass, K at a time, instead of once per token; its parts copied to a stage the batched
// kernel reads as a resident stack, so the token path's bits).
//
// On the tensor cores (issue 36; tensor_cores() says when): in a prompt pass of the fast kernels the
// experts' products take gpu_expert_mma.h's kernel instead, 16-bit inputs and FP32 sums as the dense
// layers' prompt products (gpu_gemm.h). Their bits are then a prompt pass's, no longer the token path's,
// so fetched experts take the same kernel in such a pass: the pass's experts are fetched K at a time
// (the fetcher's most per fetch), each group's products run on the fetcher's scratchpad, and a product
// has the same bits as the resident expert's (the kernel's tile depends only on its expert's bytes and
// tokens). The rule, resident or streamed alike: a pass of more than kSmallPassTokens tokens with the fast
// kernels on and GPUNVME_MOE_MMA not 0 multiplies every expert on the tensor cores, where the layer's
// gate and up share a 16-bit type (gemm_elem_for); every other pass keeps the small-pass kernels' bits (decode
// and speculative passes among them). GPUNVME_MOE_MMA=0 is the A/B switch until it is measured.
//
// Resident experts on the tensor cores are grouped on the device (gpu_moe_group.h: no wait, the products
// launched over a bound on the tiles); every other pass's grouping is made on the host from the routing
// copied back (one stream wait per MoE layer): its products (the small-pass kernels' launches per expert, the
// fetches K experts at a time) are launched by the host, which must know each one's row count.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "examples/llm/compute/gpu_expert_mma.h"
#include "examples/llm/compute/gpu_forward.h"
#include "examples/llm/compute/gpu_matmul.h"
#include "examples/llm/compute/gpu_moe_token.h"
#include "examples/llm/model/config.h"

namespace gpunvme::llm {

class GroupedMoe {
 public:
  // Buffers for passes of up to max_tokens tokens of config c (an MoE model), on the current device;
  // with fast_prompt (GpuForward's) and GPUNVME_MOE_MMA not 0, those of the tensor cores too.
  GroupedMoe(const ModelConfig& c, uint32_t max_tokens, bool fast_prompt);
  ~GroupedMoe();
  GroupedMoe(const GroupedMoe&) = delete;
  GroupedMoe& operator=(const GroupedMoe&) = delete;

  // Whether a layer whose gate and up are of these types multiplies its experts on the tensor cores.
  bool tensor_cores(GgmlType gate, GgmlType up) const { return tensor_ && gemm_elem_for(gate) == gemm_elem_for(up); }
  // Whether a small group of `n` tokens (several sequences' decode) with fetched experts goes grouped, on
  // the small-pass kernels: each expert fetched once per pass, not once per token, with the token path's bits.
  // From 4 tokens (GPUNVME_MOE_GROUP_FETCHED=1: from 2; =0: never; gpu_moe_grouped.cu says why).
  bool groups_fetched(uint32_t n) const { return fetched_small_min_ && n >= fetched_small_min_; }
  // That fewest count of tokens of a GroupedMoe made now (0: never; read from the environment).
  static uint32_t fetched_min_tokens();

  // acc[t] = the MoE FFN of the normed token xn[t], t < n, enqueued on `s` (waits for the routing); on
  // the tensor cores where `fast` (a pass of the fast kernels) and tensor_cores(), else the small-pass kernels.
  // With `src`, layer `layer`'s experts are fetched through it (st's gate, up and down give only their
  // types and shapes): on the tensor cores, or with groups_fetched_small(). On the small-pass kernels, the
  // experts of `first` (pre-gating's prediction for this layer, best first) that the pass uses are
  // fetched first, the others in order of id: with a cache of two fetches, the predicted experts read
  // ahead are then hits of the first fetch, before a later one's faults could evict them (the order
  // changes no bits: each expert's products and each token's sum are the same). after_fetches runs
  // once the layer's last fetch is enqueued (pre-gating for the next layer).
  void run(gpu_stream_t s, const ExpertStacks& st, const float* xn, uint32_t n, float* acc, ExpertSource* src = nullptr,
           uint32_t layer = 0, bool fast = true, std::span<const uint32_t> first = {},
           const std::function<void()>& after_fetches = {});

  uint64_t device_bytes() const { return device_bytes_; }

 private:
  // Host side of the grouping: rows_ (sorted row -> token) and pos_ (token t's j-th expert -> its row),
  // and each expert's first row and row count.
  void group(uint32_t n, std::span<const uint32_t> first);
  // The tensor cores' products of the gathered rows xs_ (rows of them), outputs into xs_: the used
  // experts all at once, or through src K at a time.
  void run_tensor(gpu_stream_t s, const ExpertStacks& st, uint32_t rows, ExpertSource* src, uint32_t layer, bool on_device);
  // The small-pass kernels' products (8-bit x or FP32 by type) of fetched experts, K at a time through a
  // copy of their parts (stage_).
  void run_fetched_small(gpu_stream_t s, const ExpertStacks& st, ExpertSource& src, uint32_t layer,
                         const std::function<void()>& after_fetches);

  ModelConfig c_;
  uint32_t max_tokens_;
  bool tensor_ = false;
  uint32_t fetched_small_min_ = 0;  // groups_fetched(): the fewest tokens, 0: never
  uint64_t device_bytes_ = 0;
  float* logits_ = nullptr;                            // [n][n_expert]
  uint32_t *routes_ = nullptr, *routes_host_ = nullptr;  // [n][2k]: k ids, then k weights (floats)
  uint32_t *rows_ = nullptr, *rows_host_ = nullptr;      // [n * k]: pinned host, then device
  uint32_t *pos_ = nullptr;                            // [n][k], device (its host copy after rows_host_)
  float* xs_ = nullptr;    // [n * k][n_embd]: the gathered inputs, then the experts' outputs
  float *g_ = nullptr, *u_ = nullptr;  // [n * k][n_ff]
  std::vector<uint32_t> first_, count_;  // per expert
  std::vector<uint32_t> order_;          // the used experts in fetch order (group())
  // Tensor cores: the inputs in 16-bit and their scales (the gathered tokens, then the GLU's outputs),
  // the tiles (expert by expert, tiles_of_[i]: the first of used expert i's; pinned host, then device)
  // and the experts used in routing order of id (used_: pinned host and device; used_n_ of them).
  void *xh_in_ = nullptr, *xh_mid_ = nullptr;
  float *scale_in_ = nullptr, *scale_mid_ = nullptr;
  ExpertTile *tiles_ = nullptr, *tiles_host_ = nullptr;
  uint32_t *used_ = nullptr, *used_host_ = nullptr;
  uint32_t used_n_ = 0, max_tiles_ = 0;
  // Fetched experts on the small-pass kernels: a group's parts copied here (allocated at first use), and
  // failed[j]: routing index j's read failed or lacks a part.
  uint8_t* stage_ = nullptr;
  uint64_t stage_bytes_ = 0;
  uint32_t* failed_ = nullptr;
  std::vector<uint32_t> tiles_of_;
  // GPUNVME_MOE_EVENTS=1: CUDA events around the phases of each device-grouped run (a wait at each run's
  // end), their sums printed to stderr when the GroupedMoe goes (the prompt path's profile; null: off).
  struct PhaseEvents;
  std::unique_ptr<PhaseEvents> events_;
  void mark(uint32_t phase, gpu_stream_t s);
};

}  // namespace gpunvme::llm
