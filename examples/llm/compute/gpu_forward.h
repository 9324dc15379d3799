// The forward pass on the GPU. Every kernel is enqueued on the caller's compute stream; weights are
// read where they are (a streamed slot, a resident copy): the caller hands each layer over as a
// WeightView. The arithmetic is ops.h's, the same as the CPU executor's; what runs in a layer is the
// block's (block.h), of which this is the GPU backend.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "examples/llm/compute/block.h"
#include "examples/llm/compute/greedy_pick.h"
#include "examples/llm/compute/kv_cache_shape.h"
#include "examples/llm/model/packed_ranges.h"
#include "examples/llm/model/weights.h"
#include "runtime/model/tensor_names.h"
#include "runtime/stream/gpu_fetch_types.h"

namespace gpunvme::llm {

using gpu_stream_t = struct CUstream_st*;
class TensorGemm;  // gpu_gemm.h
class GroupedMoe;  // gpu_moe_grouped.h
namespace gpu {
struct DecodeArgs;  // gpu_attention_decode.cuh
struct OwnToken;
}  // namespace gpu
class GpuArgmax;   // gpu_argmax.h
class ExpertStaging;  // gpu_expert_stage.h

// Where a layer's tensors are on the GPU: a buffer at `base` holding the file bytes `held` names, packed
// (packed_ranges.h). Whoever hands out the view keeps `held` alive while it is used.
struct WeightView {
  const uint8_t* base = nullptr;
  const PackedRanges* held = nullptr;
  const uint8_t* at(const TensorRef& t) const { return base + held->offset(t.file_offset, t.bytes); }
};

// Where a MoE layer's selected experts come from when they are not in the layer's WeightView: the GPU
// expert fetcher reads them into a scratchpad after routing, with no host round trip (gpu_executor.cpp).
class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  // Enqueues on `stream` the reads of layer `layer`'s experts ids[0..k) (ids in device memory); kernels
  // enqueued on `stream` afterwards find them through the three pointers below.
  virtual void fetch(uint32_t layer, const uint32_t* ids, uint32_t k, gpu_stream_t stream) = 0;
  virtual const uint8_t* scratch() const = 0;                     // device view of the scratchpad
  virtual const stream::GpuFetchedExpert* experts() const = 0;    // distinct experts of the last fetch
  virtual const uint32_t* selection() const = 0;                  // ids[k] -> index into experts()
  // Before a kernel on `stream` reads slice `slice` of routing id k's projection `proj` (bytes
  // [slice * B, (slice + 1) * B) of it, B = stream::part_slice_bytes(its bytes)): a source whose reads
  // may still run when fetch() returns (an overlapped fetch) enqueues the wait for that slice here.
  // part_slices(proj): how many slices the last fetch's parts of `proj` have (1: wait for it whole).
  virtual void wait_slice(uint32_t /*k*/, ::gpunvme::model::Projection /*proj*/, uint32_t /*slice*/, gpu_stream_t /*stream*/) {}
  virtual uint32_t part_slices(::gpunvme::model::Projection /*proj*/) const { return 1; }
  // After the last kernel on `stream` that reads the experts of the last fetch (for a clock of the
  // compute the reads did not hide).
  virtual void consumed(uint32_t /*layer*/, gpu_stream_t /*stream*/) {}
  // Staging (gpu_expert_stage.h): the bytes of an expert's slot in the scratchpad (0: the products read
  // the scratchpad in place), and on `stream`, before the staging's buffer `buffer` is written again,
  // the wait for any other reader of it (the load check's).
  virtual uint64_t slot_bytes() const { return 0; }
  virtual void before_staging(uint32_t /*buffer*/, gpu_stream_t /*stream*/) {}
  // Makes `stream` wait for the last fetch's placement (which experts are hits, and where), so that the
  // hits that are not pending can be copied before the fetch's reads end; false: the source cannot.
  virtual bool after_placement(gpu_stream_t /*stream*/) { return false; }

  // Pre-gating: a layer's experts predicted before its routing, from an earlier layer's state, and read
  // ahead while the drive would otherwise idle (gpu_executor.cpp says when that pays). At layer
  // `layer`'s fetch, the source names the layer to predict and where its ffn norm and router are; the
  // forward pass computes that router on this layer's post-attention state on pregate_stream() and
  // hands the ids, best first, to prefetch_predicted() on the same stream.
  // A source may also name ids of its own (`ids`, device memory, best first): the forward pass then
  // reads those ahead instead of computing the router (the next pass's first fetched layer, predicted
  // by this pass's routing there: nothing of the next token is known yet).
  // A pass of several tokens whose experts go grouped predicts for all of them (GpuForward::pregate_pass):
  // the union of their predicted experts, best first, at most `pass` of it (0: no pre-gating for such
  // passes), read ahead after the layer's last fetch of the pass.
  struct PregateTarget {
    uint32_t layer = 0;    // the layer predicted
    WeightView view;       // its weights (the norm and router are read), unless ids is set
    uint32_t experts = 0;  // how many of the predicted ids to read ahead (1 .. k)
    const uint32_t* ids = nullptr;  // the source's own prediction, or null
    uint32_t pass = 0;     // a pass of n > 1 tokens: at most min(pass, n * experts) of the union
    bool token_path = false;  // such passes fetched token by token predict too (else only grouped ones)
  };
  virtual bool pregate_target(uint32_t /*layer*/, PregateTarget& /*out*/) const { return false; }
  virtual gpu_stream_t pregate_stream() const { return nullptr; }
  virtual void prefetch_predicted(uint32_t /*layer*/, const uint32_t* /*ids*/, uint32_t /*n*/) {}
};

// The weights every token needs, resident on the GPU.
struct GlobalWeights {
  const uint8_t* token_embd = nullptr;
  const uint8_t* output_norm = nullptr;
  const uint8_t* output = nullptr;
};

class GpuForward final : public Backend {
 public:
  // Allocates activations for passes of up to `max_batch` tokens and the KV cache (f16, like llama.cpp's)
  // on the current device, and the KV cache `kv` describes. With `fast_prompt`, passes of more than kSmallPassTokens take the fast
  // kernels: the tensor-core product (gpu_gemm.h, its state made here when max_batch is above that and
  // counted in device_bytes) and flash attention (gpu_flash_attention.cuh); without, every pass takes the
  // small passes' kernels, with their bits. `globals` must stay valid while tokens run. A MoE model's
  // grouped expert buffers (gpu_moe_grouped.h) are made only where a pass can take them
  // (grouped_moe_used: `experts_fetched` false when the caller's plan keeps every expert in VRAM).
  GpuForward(const ModelConfig& c, const ModelWeights& w, uint32_t n_ctx, GlobalWeights globals, gpu_stream_t compute,
             uint32_t max_batch = 1, bool fast_prompt = true, KvCacheShape kv = {}, bool experts_fetched = true);
  ~GpuForward();
  GpuForward(const GpuForward&) = delete;
  GpuForward& operator=(const GpuForward&) = delete;

  // One pass, in three steps, all enqueued on the compute stream. A pass carries 1..max_batch tokens, each
  // in its sequence's slot at its position (pass_tokens.h: the caller keeps SeqSlots' rules): each
  // layer's weights are read once for all of them, the KV cache is filled for all of them, and a token
  // attends causally to its own sequence's positions only. Which kernels a token takes depends on its
  // segment (its sequence's consecutive tokens in the pass), never on the others': a segment of up to
  // kSmallPassTokens tokens takes the small passes' kernels, whose bits are a pass of that token alone's
  // (gpu_matmul.h), a longer one the fast prompt kernels, over its own rows. So a sequence's numbers are
  // the same beside any other sequences. A pass at a position overwrites that slot's cache from there on
  // (a speculative rollback, or a new sequence in a freed slot).
  void embed(std::span<const PassToken> tokens);                // x = scaled embeddings of the pass's tokens
  void embed(uint32_t token, uint32_t pos);                     // slot 0's `token` at pos
  void embed(std::span<const uint32_t> tokens, uint32_t pos0);  // slot 0's tokens at pos0, pos0 + 1, ...
  // x = layer(x) at the pass's positions; a MoE layer's experts come from `experts` when given, else
  // from the view (a batch's MoE layers run their experts token by token).
  void layer(const LayerWeights& l, WeightView v, ExpertSource* experts = nullptr);
  // Final norm and output head; waits for the stream. The logits of the pass's tokens whose
  // PassToken::logits is set, in pass order (rows x n_vocab floats, at most max_logit_rows() rows), in
  // pinned host memory the next pass's logits overwrite (no copy on the host).
  std::span<const float> pass_logits();
  // The same norm and head for a pass with one logit row, then its greedy pick on the device
  // (gpu_argmax.h): 8 bytes reach the host, not the row; waits for the stream.
  GreedyPick pass_pick();
  // An event (with timing) recorded where each pass's work ends, before the wait: the executor's
  // per-token profile (GPUNVME_DECODE_EVENTS). Null: none.
  void time_pass_end(struct CUevent_st* e) { pass_end_ = e; }
  // Chained greedy decoding (Executor::submit_greedy): a one-token pass whose token is the last pick's,
  // copied on the device from where the pick kernel wrote it (no host round trip; t.id is not read),
  // then, after its layers, the head and the pick into `slot` (0 or 1) without a wait; wait_pick
  // waits for a slot's pick. Two passes may be in flight, each with its own slot.
  void embed_picked(PassToken t);
  void enqueue_pick(uint32_t slot);
  GreedyPick wait_pick(uint32_t slot);
  uint32_t max_batch() const { return max_batch_; }
  uint32_t max_logit_rows() const { return logit_rows_; }
  uint32_t max_seqs() const { return kv_.seqs; }

  gpu_stream_t stream() const { return stream_; }
  // The pass's hidden state (n x n_embd floats, token rows in pass order): what a layer range run on
  // another GPU hands over (pipeline_stage.h); a pass started by set_pass instead of embed finds it there.
  float* hidden() const { return x_; }
  // Bytes of GPU memory this object allocated (activations, the KV cache unless in host memory, the
  // tensor-core product's scratch); the KV cache's bytes and where it is.
  uint64_t device_bytes() const { return device_bytes_; }
  uint64_t kv_bytes() const { return kv_bytes_; }
  bool kv_in_host() const { return kv_.host; }
  // Pre-gating's predictions made for passes of several tokens (pregate_pass), since construction.
  uint64_t pass_pregates() const { return pass_pregates_; }
  // Tokens' MoE layers run as norm_moe_add's fused launches, since construction.
  uint64_t fused_moe_layers() const { return fused_moe_layers_; }
  // Where the products of the last expert fetch read its experts, when copied into VRAM first
  // (gpu_expert_stage.h; base null: in the scratchpad): for a reader after this pass's kernels so far.
  const stream::StagedExperts& last_staged() const { return staged_; }

  // Backend (block.h): kernels enqueued on the compute stream, weights read through the current
  // layer's view. moe() keeps the GPU's expert machinery to itself: experts fetched after routing
  // (ExpertSource), pre-gating on the source's side stream, a batch's tokens routed one by one.
  void norm(Act in, const TensorRef& w, Act out) override;
  void matmul(const TensorRef& w, const TensorRef& bias, Act in, Act out) override;
  void head_norm_rope(Act qk, const TensorRef& norm, const RopeParams& rope) override;
  void store_kv(uint32_t layer) override;
  void attend(const AttnParams& p) override;
  void glu(Act gate, Act up, FfnAct act) override;
  void moe(const LayerWeights& l, Act in, Act out) override;
  void add(Act x, Act y) override;
  // One token's fusions (block.h, gpu_matmul.h: the same bits): the input norm with Q, K and V (of one
  // type), the FFN's norm with gate, up and the GLU, the residual add in the O and down projections.
  void matmuls(std::span<const Product> ps, Act in) override;
  void norm_matmuls(const TensorRef& norm_w, Act in, std::span<const Product> ps) override;
  void gated_matmul(const TensorRef& gate, const TensorRef& up, Act in, FfnAct act) override;
  void norm_gated_matmul(const TensorRef& norm_w, Act in, const TensorRef& gate, const TensorRef& up, FfnAct act) override;
  void matmul_add(const TensorRef& w, const TensorRef& bias, Act in, Act x) override;
  // Any pass's fusions (the same bits as the operations): Q/K norms, RoPE and the KV store in one kernel;
  // a post-norm and its residual add in one.
  void rope_store_kv(const TensorRef& q_norm, const TensorRef& k_norm, const RopeParams& rope, uint32_t layer) override;
  void norm_add(Act y, const TensorRef& w, Act x) override;
  // One token's product with its post-norm and residual add in one launch (gpu_matvec_norm_add).
  void matmul_norm_add(const TensorRef& w, const TensorRef& bias, Act in, const TensorRef& norm_w, Act x) override;
  // One token's norm, routed FFN (experts in the layer's view) and residual add in three launches
  // (gpu_moe_token.h); GPUNVME_MOE_FUSED=0 (read at construction): the operations apart, the A/B switch.
  void norm_moe_add(const TensorRef& norm_w, const LayerWeights& l, Act x) override;
  // One token's Q/K norms, RoPE and KV store in its attention's launch.
  void rope_store_attend(const TensorRef& q_norm, const TensorRef& k_norm, const RopeParams& rope, const AttnParams& p) override;
  // Throws std::runtime_error for 0 or more than max_batch() tokens, a slot it has not, or a position
  // past n_ctx. Copies the tokens' ids, positions and slots to the GPU (the kernels read them there).
  void set_pass(std::span<const PassToken> tokens) override;
  using Backend::set_pass;
  // Copies through the compute stream and waits for it.
  void write(Act a, std::span<const float> v) override;
  std::vector<float> read(Act a) override;
  // The layer whose weights the operations read (the view of layer(); tests set it for single operations).
  void use_layer(WeightView v, ExpertSource* experts = nullptr) { view_ = v, src_ = experts; }
  // The kernels a token's MoE with its experts in VRAM enqueues (moe_token), by part: all of them unless
  // llm_pass_compute --decode-pass times the parts one at a time (its graphs of one part each).
  enum MoePart : uint32_t { kMoeRouter = 1, kMoeRoute = 2, kMoeGateUp = 4, kMoeGlu = 8, kMoeDown = 16, kMoeSum = 32, kMoeCopy = 64 };
  void time_moe_parts(uint32_t parts) { moe_parts_ = parts; }

 private:
  float* buf(Act a) const;
  // Before x_ changes: the compute stream waits for the pre-gating's read of it, if one is pending.
  void before_residual_write(Act x);
  // Whether long passes' attention takes the flash kernel (fast kernels on, heads narrow enough for it).
  bool flash() const;
  // pregate_here: after this token's fetch, the pass's prediction (its last fetch of the layer).
  void moe_token(const LayerWeights& l, const float* xn, uint32_t t, bool pregate_here = false);
  // Attention of tokens [first, first + count) on decode_attention (gpu_attention_decode.cuh), or where
  // heads are too wide for it on attention_kernel, score_rows_ tokens per launch.
  void attend_small(const AttnParams& p, uint32_t first, uint32_t count);
  gpu::DecodeArgs decode_args(const AttnParams& p, uint32_t t0, const gpu::OwnToken& own) const;
  // to_host false: only enqueued, nothing copied nor waited for (an empty span).
  std::span<const float> logits_of(uint32_t first, uint32_t rows, bool gather, bool to_host = true);
  // The final norm and head of the pass's logit rows into logits_d_; how many rows.
  uint32_t enqueue_head();
  void wait_pass();  // the end of the pass's work on the stream (a blocking-sync event)
  void enqueue_embed();  // the pass's embeddings from the ids set_pass copied (or embed_picked's)
  void pregate(const LayerWeights& l, ExpertSource& experts);
  void pregate_pass(const LayerWeights& l, ExpertSource& experts, bool token_path);
  // The pass's last prediction for layer `layer`, best first, on the host (empty: none): the grouped
  // path fetches those experts first (gpu_moe_grouped.h).
  std::span<const uint32_t> predicted_on_host(uint32_t layer);
  void route(gpu_stream_t s, const LayerWeights& l, WeightView v, const float* xn, float* logits, uint32_t* ids,
             uint32_t parts = kMoeRouter | kMoeRoute);
  uint64_t kv_layer_offset(uint32_t layer) const;
  void alloc_kv_cache();  // halves to the layer's block of the cache; throws outside it

  ModelConfig c_;
  ModelWeights w_;
  uint32_t n_ctx_;
  GlobalWeights globals_;
  gpu_stream_t stream_;
  uint32_t n_ = 1;  // the pass's tokens
  // The pass's rows in kernel groups: a segment (one sequence's consecutive tokens) of more than
  // kSmallPassTokens on the fast kernels alone (`fast`, at `pos0` of slot `seq`), or a run of smaller
  // segments together on the small passes' kernels (whose rows do not depend on one another).
  struct Group {
    uint32_t first = 0, count = 0;
    bool fast = false;
    uint32_t seq = 0, pos0 = 0;
  };
  std::vector<Group> groups_;
  std::vector<uint32_t> logit_rows_of_pass_;  // the rows PassToken::logits asks for
  WeightView view_;             // the layer being computed
  ExpertSource* src_ = nullptr;  // its experts, when fetched
  uint32_t max_batch_ = 1, logit_rows_ = 1, score_rows_ = 1;
  bool fast_prompt_ = true;  // passes of more than kSmallPassTokens on the fast kernels
  uint64_t device_bytes_ = 0, kv_bytes_ = 0;
  // Device buffers (floats unless said otherwise).
  float *x_ = nullptr, *xn_ = nullptr, *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *att_ = nullptr, *tmp_ = nullptr;
  float *gate_ = nullptr, *up_ = nullptr, *scores_ = nullptr, *logits_d_ = nullptr, *router_ = nullptr, *moe_acc_ = nullptr;
  float *moe_gate_ = nullptr, *moe_up_ = nullptr, *moe_out_ = nullptr;  // MoE: [k][n_ff], [k][n_ff], [k][n_embd]
  uint32_t* experts_ = nullptr;  // top-k expert ids and their weights (as floats after the ids)
  // The pass on the GPU: [ids | positions | slots | logit rows], max_batch each (pass_dev_); the host's
  // pinned copies in turn (pass_host_[2]), each reused after its copy's event (pass_copied_).
  uint32_t* pass_dev_ = nullptr;
  uint32_t* norm_done_ = nullptr;  // gpu_matvec_norm_add's counter of finished blocks (0 between launches)
  uint32_t* pass_host_[2] = {nullptr, nullptr};
  struct CUevent_st* pass_copied_[2] = {nullptr, nullptr};
  uint32_t pass_turn_ = 0;
  const uint32_t* ids() const { return pass_dev_; }
  const uint32_t* positions() const { return pass_dev_ + max_batch_; }
  const uint32_t* slots() const { return pass_dev_ + 2 * max_batch_; }
  const uint32_t* logit_rows_dev() const { return pass_dev_ + 3 * max_batch_; }
  KvCacheShape kv_;                                   // end set: the layers the cache holds
  uint16_t *k_cache_ = nullptr, *v_cache_ = nullptr;  // [layer - kv_.first][slot][pos][kv_dim] halves
  float* logits_host_ = nullptr;                       // pinned
  struct CUevent_st* done_ = nullptr;                  // blocking-sync event: the end of a token
  // Pre-gating: the predicted layer's normed input, router logits and top-k (ids, then weights); events
  // for x_ ready (compute -> side stream) and read (side -> compute, before x_ changes).
  float *xn_pre_ = nullptr, *router_pre_ = nullptr;
  uint32_t* pred_ = nullptr;
  struct CUevent_st *pre_x_ = nullptr, *pre_read_ = nullptr;
  bool pre_pending_ = false;  // the compute stream must wait for pre_read_ before x_ changes
  // A pass of several tokens (pregate_pass): xn_pre_ and router_pre_ hold max_batch rows, routes_pre_
  // each token's top k ([max_batch][2k]); pred_ the union, copied to pred_host_ (pinned) for the grouped
  // path's order (pred_copied_ after it; pred_layer_: the layer it predicts, ~0u: none).
  uint32_t* routes_pre_ = nullptr;
  uint32_t* pred_host_ = nullptr;
  struct CUevent_st* pred_copied_ = nullptr;
  uint32_t pred_layer_ = ~0u, pred_n_ = 0;
  uint64_t pass_pregates_ = 0;
  // Passes of more than kSmallPassTokens tokens: their layer matrices on the tensor cores (null: none).
  std::unique_ptr<TensorGemm> gemm_;
  // MoE, beside gemm_: a prompt pass's experts in VRAM grouped by expert (null: none).
  std::unique_ptr<GroupedMoe> grouped_;
  std::unique_ptr<GpuArgmax> argmax_;  // pass_pick's
  std::unique_ptr<ExpertStaging> stage_;  // fetched experts copied into VRAM before their products
  stream::StagedExperts staged_;          // the last fetch's (last_staged)
  uint32_t moe_parts_ = ~0u;  // time_moe_parts'
  bool moe_fused_ = true;     // norm_moe_add's launches (GPUNVME_MOE_FUSED)
  uint64_t fused_moe_layers_ = 0;
  uint32_t* moe_done_ = nullptr;  // their router launch's counter (0 between launches)
  struct CUevent_st* pass_end_ = nullptr;  // time_pass_end's
};

// Whether a GpuForward of config c can run a MoE layer's experts grouped (GpuForward::moe's rule): a
// segment of the fast kernels (fast_prompt, more than kSmallPassTokens tokens), or several tokens'
// fetched experts (GroupedMoe::groups_fetched, from GroupedMoe::fetched_min_tokens()).
bool grouped_moe_used(const ModelConfig& c, uint32_t max_batch, bool fast_prompt, bool experts_fetched);

// Whether a CUDA device can be used; `why` says why not.
bool gpu_available(std::string* why);

}  // namespace gpunvme::llm
