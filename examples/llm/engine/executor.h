// Who computes a token: the CPU executor (weights read once into host memory; the reference, and
// what runs without a GPU) or the GPU executor (resident layers in GPU memory, the rest streamed per
// token into slots by GPU-issued NVMe reads while the previous layer computes). The generation loop
// (generate.cpp) is written once over this interface.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "examples/llm/compute/gpu_forward.h"
#include "examples/llm/compute/pass_tokens.h"
#include "examples/llm/engine/model_on_device.h"
#include "examples/llm/engine/expert_lag.h"
#include "examples/llm/engine/load_check.h"
#include "examples/llm/engine/pipeline_stage.h"
#include "examples/llm/engine/residency_plan.h"
#include "examples/llm/engine/sampler.h"
#include "host/recovery.h"
#include "runtime/stream/expert_fetcher.h"

namespace gpunvme::llm {

// The expert fetcher's largest read by default: the expert kernels wait per part (gate, up, down of an
// expert), so the reads must end in order and in pieces small enough that the last part waits for
// little more than its own bytes. At 256 KiB a modeled drive is still bandwidth-bound (its latency
// and IOPS caps matter only far below), and one emulator thread copies a read in about 75 µs.
// Measured against 1 MiB and 512 KiB in docs/performance.md, session 10.
inline constexpr uint64_t kExpertReadBytes = 256 << 10;
// The range GpuExecOptions::expert_read_bytes may take (`--expert-read`): a page at least, and far
// more than any drive's MDTS at most.
inline constexpr uint64_t kMinExpertReadBytes = 4 << 10, kMaxExpertReadBytes = 1ull << 30;

struct ExecStats {
  uint64_t streamed_bytes = 0;   // read from the namespace during tokens (not at start)
  double io_seconds = 0;         // GPU time spent on those reads (sum over layers)
  double stall_seconds = 0;      // compute waited for I/O
  uint64_t resident_bytes = 0;   // read once at start into GPU memory
  uint64_t bytes_per_step = 0;   // weight bytes streamed for one token (every streamed layer once)
  uint64_t ram_bytes = 0;        // RAM tier: pinned host memory read once at start
  uint64_t ram_bytes_per_step = 0, ram_copied_bytes = 0;  // copied to the GPU per token / in all
  uint32_t resident_layers = 0, ram_layers = 0, streamed_layers = 0;
  ResidencyPlan plan;            // GPU executor: where every layer lives
  bool has_experts = false;      // the fetcher ran (MoE with experts not in VRAM)
  stream::FetcherMetrics experts;
  LagCounts lag;                 // how a one-token-lag prefetch would have done (expert_lag.h)
  bool expert_prefetch = false;  // the one-token-lag prefetch ran
  uint32_t expert_pregate = 0;   // the pre-gating prefetch ran, reading this many predicted experts per layer
  uint32_t expert_pregate_first = 0;  // and this many for the next pass's first fetched layer (GpuExecOptions)
  uint32_t expert_pregate_pass = 0;   // a pass of several tokens: at most this many of their union (0: none)
  uint64_t pregate_passes = 0;        // predictions made for passes of several tokens (GpuForward::pregate_pass)
  bool expert_overlap = false;   // the expert kernels computed on parts read while the rest streamed
  uint64_t expert_window_bytes = 0;  // the fetcher's reads in flight (FetcherOptions::read_window_bytes; 0: all)
  uint64_t expert_read_bytes = 0;    // its largest read (GpuExecOptions::expert_read_bytes)
  stream::PrefetchMetrics prefetch;  // what it did, and the fetches' stall time per layer
  host::RecoveryStats recovery;      // retries, aborts, resets behind the streamed and fetched reads (#15)
  VerifyStats verify;                // the checks of the loaded bytes against the deploy record (load_check.h)
  uint64_t vram_budget = 0;          // GPU executor: the VRAM budget its plan was made with (0: --resident N)
  uint64_t graph_replays = 0;        // GPU executor: one-token passes whose layers were a graph's replay (decode_graph)
  uint32_t stream_slots = 0;         // GPU executor: its NVMe tier's streaming slots (stream_slots.h; 0: no streamer)
  uint64_t slot_bytes = 0;           // and one slot's bytes of pinned host memory
  std::vector<GpuShare> gpus;        // --gpus N or ids: each GPU's layers and plan (plan above: the GPUs' joined)
};

class Executor {
 public:
  virtual ~Executor() = default;
  // One pass over the layers for 1 .. max_batch() tokens of one or more sequences, each token in its
  // sequence's slot (0 .. max_seqs() - 1) at its position (pass_tokens.h, whose rules a pass must
  // follow: a refused one changes nothing). Each layer's weights are read once for all of them, the KV
  // cache is filled for all of them, a token attends causally to its own sequence only. Returns the
  // logits of the tokens flagged for them (n_vocab floats each, in the pass's order), valid until the
  // next pass. Each row has the bits a pass of that token alone gives, beside any other sequences. A
  // pass at a position before its slot's length overwrites the cache from there on and attends to the
  // positions before as last written: rolling back a speculative pass is starting the next one there.
  virtual std::span<const float> pass(std::span<const PassToken> tokens) = 0;
  // Sequence 0's tokens[i] at positions pos0 + i: the logits of every token (n x n_vocab, row i for
  // tokens[i]) when `all_logits`, else of the last one (n_vocab floats). The one-sequence case of the above.
  std::span<const float> pass(std::span<const uint32_t> tokens, uint32_t pos0, bool all_logits) {
    return pass(one_sequence(tokens, pos0, all_logits));
  }
  // A pass whose one row of logits (exactly one token flagged) is wanted only for its greedy pick
  // (greedy_pick.h: the id and whether the row was all finite): the GPU executor picks on the device
  // and copies 8 bytes back instead of the row (issue 36); by default, pass() and the host's pick.
  virtual GreedyPick pass_greedy(std::span<const PassToken> tokens) {
    if (logit_rows(tokens) != 1) throw std::logic_error("pass_greedy: a pass with one row of logits");
    return greedy_pick(pass(tokens));
  }
  // Chained greedy decoding (issue 36), where chains(): one-token greedy passes, each enqueued before
  // the previous one's pick reached the host, so the device never waits for the host between tokens.
  // submit_greedy(t, false) enqueues t (t.logits is implied) as given; submit_greedy(t, true) takes
  // t's token from the pick of the pass submitted just before it, on the device (t.id is not read).
  // collect_greedy() waits for the oldest submitted pass and returns its pick (as pass_greedy would).
  // At most two passes outstanding; any other call on the executor first waits for them and drops
  // their picks (a pass run ahead past the end of a generation).
  virtual bool chains() const { return false; }
  virtual void submit_greedy(PassToken, bool /*previous_pick*/) { throw std::logic_error("this executor does not chain greedy passes"); }
  virtual GreedyPick collect_greedy() { throw std::logic_error("this executor does not chain greedy passes"); }
  // One token at `pos`: a pass of one; its logits.
  std::span<const float> step(uint32_t token, uint32_t pos) { return pass(std::span(&token, 1), pos, false); }
  virtual uint32_t max_batch() const = 0;
  // At most this many rows of logits per pass (a speculative pass: the draft + 1).
  virtual uint32_t max_logit_rows() const { return max_batch(); }
  // Sequences the KV cache holds at once (CpuExecOptions / GpuExecOptions::max_seqs).
  virtual uint32_t max_seqs() const { return 1; }
  // The sequence in slot `seq` is done: the slot is free, and its next pass starts at position 0.
  virtual void end_sequence(uint32_t seq) { check_slot(seq, max_seqs()); }
  // Ends all outstanding work (bounded) and reports any I/O error; called once after the last step.
  virtual void finish() {}
  virtual ExecStats stats() const = 0;
  virtual std::string describe() const = 0;
};

struct CpuExecOptions {
  // Every byte read checked against the deploy record (load_check.h; false: --no-verify).
  bool verify = true;
  // Sequences held at once, each with a KV cache of n_ctx positions (host memory: that many times one's).
  uint32_t max_seqs = 1;
  // Tokens per pass at most (0: any number; a scheduler may want the GPU executor's limit on the CPU).
  uint32_t max_batch = 0;
};
std::unique_ptr<Executor> make_cpu_executor(const ModelOnDevice& m, uint32_t n_ctx, const CpuExecOptions& o);
inline std::unique_ptr<Executor> make_cpu_executor(const ModelOnDevice& m, uint32_t n_ctx, bool verify = true) {
  return make_cpu_executor(m, n_ctx, CpuExecOptions{.verify = verify});
}

// Dense layer bytes that reach the GPU per token by some way of copying (the RAM tier, ram_tier.h; the
// benchmark's mmap baseline), layers in order and cyclic across tokens: acquire() makes `compute` wait
// for the next layer and returns where it is; release() lets its buffer be reused after the kernels
// enqueued on `compute` so far.
class LayerSource {
 public:
  virtual ~LayerSource() = default;
  virtual WeightView acquire(gpu_stream_t compute) = 0;
  virtual void release(gpu_stream_t compute) = 0;
  virtual void sync() {}  // waits (bounded) for copies still running
};
// Makes a LayerSource for the NVMe tier's layers (their dense parts, in order), instead of GPU-issued reads.
using LayerSourceFactory = std::function<std::unique_ptr<LayerSource>(std::vector<PackedRanges> layers)>;

struct GpuExecOptions {
  std::optional<uint32_t> resident_layers;  // --resident N: the first N layers whole in GPU memory, the rest stream
  // The residency plan's budgets (when resident_layers is not given). VRAM: the layers' and the KV
  // cache's (when in VRAM); default what the GPU has free after the globals and activations, less the
  // RAM tier's buffers and a reserve.
  std::optional<uint64_t> vram_budget;
  uint64_t ram_budget = 0;
  // Streaming slots (--slots): 0, auto: 2 on one GPU (double buffering), on each GPU of several a slot
  // per streamed layer within its share of host memory (stream_slots.h, the one decision); N (1..64):
  // N, and as many RAM-tier buffers.
  uint32_t slots = 0;
  uint32_t queues = 4;           // GPU-driven NVMe queues (the streamer's; MoE: as many again for the expert fetcher)
  std::optional<uint64_t> expert_cache_bytes;  // MoE: LRU cache of fetched experts (default: the plan's, from the RAM budget)
  std::optional<bool> expert_prefetch;  // MoE: one-token-lag prefetch (default: on when the cache holds 2 fetches)
  // MoE: pre-gating (gpu_forward.h): at each fetched layer, the next fetched layer's router on this
  // layer's state, and its best `expert_pregate` predicted experts read ahead (0: off; at most k). The
  // fetcher's cache gets two fetches of slots if the budget gave it fewer. Default: max(1, k / 2)
  // where expert_prefetch is not set (off: no prefetch of either kind) and the controller grants the
  // queues its reads need, whatever the expert cache; else 0. Why k / 2: the predictions queue behind the fetch's
  // reads, and must keep the drive busy through the next layer's routing and the first reads of its
  // fetch; at the ~91-98 % hit rates measured, k / 2 did that best (Qwen3: 4 of 8 beat 2, 3 and 6;
  // Mixtral: 1 of 2 beat 2; docs/performance.md, session 12).
  std::optional<uint32_t> expert_pregate;
  // MoE, with pre-gating on: at the last fetched layer of a pass, read ahead this many of the experts
  // the pass routed to at its first fetched layer (best first), for the next pass's (one-token lag:
  // nothing of the next token exists yet). They fill the drive's idle stretch at the token boundary
  // (the pass's tail, sampling, the layers before the first fetch). A wrong one stops reading once
  // that fetch is placed (FetcherOptions::cut_wrong_prefetches), so it costs only its reads in
  // flight. Default: pre-gating's count (Mixtral 22G:0 +1 to +2 points, Qwen3 within a point;
  // docs/performance.md, session 14); 0: off; at most k.
  std::optional<uint32_t> expert_pregate_first;
  // MoE: the expert kernels start on the parts already read while the rest stream (default: on where
  // the CUDA driver has stream memory waits); off: they start once all of the layer's reads ended.
  std::optional<bool> expert_overlap;
  // MoE: bytes of a layer's expert reads in flight at once, issued in the order the kernels use them
  // (default: the fetcher's, FetcherOptions::read_window_bytes; 0: all at once).
  std::optional<uint64_t> expert_window_bytes;
  // MoE: the largest read of an expert fetch (default kExpertReadBytes; the drive's MDTS caps it too).
  std::optional<uint64_t> expert_read_bytes;
  uint32_t max_batch = 1;        // tokens per pass at most (the GPU forward pass's activations are sized for it)
  // Passes of more than kSmallPassTokens (32) tokens on the fast kernels: matrices on the tensor cores
  // (compute/gpu_gemm.h), flash attention (compute/gpu_flash_attention.cuh); their last bits differ from
  // token by token. false: the small passes' kernels, every logit as token by token to the bit.
  bool fast_prompt = true;
  // One-token passes over a model all in GPU memory (one GPU) replay a CUDA graph of their layers
  // (compute/gpu_graph.h: the same kernels, the same bits, one launch; GPUNVME_LLM_DECODE_GRAPH=0: off).
  bool decode_graph = true;
  // Greedy one-token passes chained on the device (Executor::chains; GPUNVME_LLM_CHAIN=0: off), one GPU,
  // every layer in its memory: the next pass's token is the pick's, copied on the GPU.
  bool decode_chain = true;
  // Sequences held at once: a slot of n_ctx positions each in the KV cache, in GPU memory beside the
  // activations (allocated before the residency plan's VRAM budget is taken), or with kv_in_host in
  // pinned host memory that attention reads over the host link (more sequences than VRAM holds).
  // 0 (--max-seqs auto): as many as the VRAM budget gives (auto_kv_slots' rule, residency_plan.h), at
  // most max_batch and 64. The residency plan takes a VRAM cache's bytes from the VRAM budget first.
  uint32_t max_seqs = 1;
  bool kv_in_host = false;
  // The VRAM and RAM tiers' bytes checked at start, streamed layers and fetched experts on their first
  // read, against the deploy record's CRCs (load_check.h; false: --no-verify, the open check stays).
  bool verify = true;
  LayerSourceFactory nvme_source;  // set: the NVMe tier's dense bytes come from it (bench/llm_tokens' mmap baseline)
  // GPUs of this host the layers are split over (multi_gpu_executor.h; above 1 needs a build with NCCL).
  // vram_budget is each GPU's, ram_budget all of them together (split evenly).
  uint32_t gpus = 1;
  // --gpus 0,2 or device=1 (gpu_ids.h): the CUDA device of each GPU in pipeline order, `gpus` of them;
  // empty: the first `gpus`. Each must be present (refused naming the missing ones); one GPU by id runs
  // on that device (made current on the calling thread) and reports itself in ExecStats::gpus.
  std::vector<int> gpu_ids;
  // --gpus N with --vram-budget's list: each GPU's budget (N of them; over vram_budget). The layers split
  // by the budgets (split_by_budgets) whenever budgets are given; without, by each GPU's free memory
  // before it starts (split_gpus); by equal counts with --resident N.
  std::vector<uint64_t> vram_budgets;
  // --gpus N, each GPU reading its layers from a namespace of its own (a copy of the model on each, which
  // the load checks hold to the deploy record): GPU g streams through gpu_controllers[g] (one, or a
  // striped copy's members) with its queues from 2. Empty: every GPU streams through the controllers
  // given, each from its own queue ids. Start-time loads read through the model's own reader.
  std::vector<std::vector<host::Controller*>> gpu_controllers;
  // Set by the multi-GPU executor for each GPU's executor: its layer range, queues and link.
  std::optional<PipelineStage> stage;
};

// The GPUs of `--gpus` (a count, or CUDA ids) against those CUDA sees: throws gpu_ids.h's refusal
// naming the missing ones. make_gpu_executor checks it; a tool that uses a GPU before (bench/llm_tokens
// measures the host link) calls it first.
void check_gpus_here(uint32_t count, std::span<const int> ids);

// CUDA builds with a GPU; otherwise throws naming why.
std::unique_ptr<Executor> make_gpu_executor(host::Controller& c, const ModelOnDevice& m, uint32_t n_ctx,
                                            const GpuExecOptions& o);
// The same with the controllers the NVMe tier streams through: one, or a striped model's members in
// order (m.stripe; each gets GPU queues, a GPU submitter and an I/O stream of its own). They may be
// other controllers of the same namespaces than those m was opened with (bench/llm_tokens streams
// through modeled drives). MoE expert fetches from a striped set are refused (not supported yet).
std::unique_ptr<Executor> make_gpu_executor(std::span<host::Controller* const> controllers, const ModelOnDevice& m,
                                            uint32_t n_ctx, const GpuExecOptions& o);

}  // namespace gpunvme::llm
