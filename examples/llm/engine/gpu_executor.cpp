// The GPU executor: the engine as an outside engine would use gpunvme's runtime. Where each layer lives
// is the residency plan's (residency_plan.h), made once at start from the budgets (or --resident N):
//   - token embeddings, output norm and head: read once at start into GPU memory;
//   - VRAM layers: read once into a GPU buffer each (a MoE layer: its dense part, or the whole layer
//     when the plan keeps its experts in VRAM too);
//   - RAM layers: read once into pinned host memory, copied to the GPU per token on a stream of their
//     own, running ahead of the compute (ram_tier.h);
//   - NVMe layers: a LayerStreamer over GPU-driven NVMe queues (GpuSubmitter) reads it into a
//     slot on the `io` stream while the previous layer computes on the `compute` stream; the compute
//     stream waits on the GPU for exactly its layer, the slot is refilled only after the layer's
//     kernels ran (release on `compute`). Loads run ahead across token boundaries: the layer order
//     does not depend on the token. How many slots: stream_slots.h (2 on one GPU; on each GPU of
//     several, a slot per streamed layer, so its drive reads on through the other GPUs' turns).
//   - MoE models: the streamer reads only a streamed layer's dense part (attention, norms, router); the
//     router's top-k ids stay in GPU memory and the GPU expert fetcher reads just those experts (with an
//     optional LRU cache in GPU-mapped pinned memory) before the expert kernels run, on the compute
//     stream. With a cache of two fetches, the experts the previous token chose at a layer are
//     prefetched into it on a stream of their own before the layer runs (one-token lag); without a
//     cache, the next fetched layer's likeliest experts, from its router on this layer's state, are
//     read ahead into two fetches of slots (pre-gating; docs/engine.md).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>

#include "examples/llm/compute/gpu_forward.h"
#include "examples/llm/compute/gpu_graph.h"
#include "examples/llm/compute/gpu_matmul.h"
#include "device/cuda_check.h"
#include "examples/llm/engine/decode_profile.h"
#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/expert_lag.h"
#include "examples/llm/engine/gpu_ids.h"
#include "examples/llm/engine/gpu_load_check.h"
#include "examples/llm/engine/host_lead.h"
#include "examples/llm/engine/multi_gpu_executor.h"
#include "examples/llm/engine/ram_tier.h"
#include "examples/llm/engine/stream_slots.h"
#include "examples/llm/engine/vram_reserve.h"
#include "driver/commands.h"
#include "runtime/plan/command_plan.h"
#include "runtime/stream/gpu_expert_fetcher.h"
#include "runtime/stream/gpu_queues.h"
#include "runtime/stream/gpu_submitter.h"
#include "runtime/stream/layer_streamer.h"

namespace gpunvme::llm {
namespace {

// GPU memory holding model bytes (packed_ranges.h), read by the start's reader (model_reader.h: its
// workers read pieces at once into pinned staging) and copied from there by each worker, while the
// others read on; each piece CRC'd by its worker (load_check.h).
struct DeviceCopy {
  uint8_t* p = nullptr;
  PackedRanges held;  // its bytes: held.bytes
  DeviceCopy(LoadCheck& check, PackedRanges r) : held(std::move(r)) {
    device::check_cuda(cudaMalloc(reinterpret_cast<void**>(&p), held.bytes ? held.bytes : 1), "cudaMalloc for resident weights");
    int gpu = 0;
    device::check_cuda(cudaGetDevice(&gpu), "cudaGetDevice");
    std::vector<LoadCheck::Range> ranges;
    for (const PackedRanges::Piece& q : held.pieces) ranges.push_back({q.begin, q.end - q.begin});
    check.read_staged(ranges, [&](const uint8_t* data, uint64_t off, uint64_t n) {
      device::check_cuda(cudaSetDevice(gpu), "cudaSetDevice for the load");  // a worker's thread: this executor's GPU
      device::check_cuda(cudaMemcpy(p + held.offset(off, n), data, n, cudaMemcpyHostToDevice), "copy of resident weights");
    });
  }
  DeviceCopy(LoadCheck& check, const TensorRef& t) : DeviceCopy(check, PackedRanges::span(t.file_offset, t.file_offset + t.bytes)) {}
  ~DeviceCopy() { cudaFree(p); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  const uint8_t* at(const TensorRef& t) const { return view().at(t); }
  WeightView view() const { return {p, &held}; }
};

// MoE experts of layers not wholly in VRAM: the GPU expert fetcher reads the routed experts after the
// router ran, on the compute stream, on queues of its own (the streamer's kernels drive theirs on the
// I/O stream). Each fetch's ids are also copied into a per-layer log: the one-token-lag prediction
// counters (expert_lag.h) read it once per token, and the prefetch reads layer L's entry (the experts
// the previous pass chose there) into the cache on a stream of its own before layer L is computed.
class FetchedExperts final : public ExpertSource {
 public:
  // ctrls: the namespace's controller, or a striped set's members in order (m.stripe): each member
  // gets the fetcher's queues (and pre-gating's) from first_qid on, after the streamer's.
  FetchedExperts(std::span<host::Controller* const> ctrls, const ModelOnDevice& m, const ResidencyPlan& plan,
                 uint32_t first_qid, uint32_t queues,
                 uint64_t cache_bytes, std::optional<bool> prefetch, std::optional<uint32_t> pregate_opt,
                 std::optional<uint32_t> pregate_first, const std::vector<std::optional<WeightView>>& dense,
                 std::optional<bool> overlap, std::optional<uint64_t> window, uint64_t read_bytes)
      : pregate_(pregate_count(ctrls, m, first_qid + queues, prefetch, pregate_opt)),
        member_(open_queues(ctrls, first_qid, queues, pregate_ > 0)),
        fetcher_(fetcher_members(ctrls), m.stripe ? &*m.stripe : nullptr, stream::ExpertCatalog::from_map(*m.map),
                 fetcher_options(m, cache_bytes, pregate_, window, read_bytes)),
        k_(m.config.n_expert_used),
        lag_(k_, fetched_expert_bytes(plan)),
        ids_(size_t(m.config.n_layer) * k_),
        logged_(m.config.n_layer, false) {
    if (pregate_ > k_)
      throw std::runtime_error("--expert-pregate " + std::to_string(pregate_) + ": a token routes to " + std::to_string(k_) +
                               " experts per layer, so at most " + std::to_string(k_) + " can be predicted");
    if (pregate_ > 0 && prefetch.value_or(false))
      throw std::runtime_error("--expert-prefetch on (one-token lag) and --expert-pregate both read ahead into the same "
                               "prefetch slots: choose one");
    if (pregate_first.value_or(0) > k_)
      throw std::runtime_error("--expert-pregate-first " + std::to_string(*pregate_first) + ": a token routes to " +
                               std::to_string(k_) + " experts per layer, so at most " + std::to_string(k_) + " can be predicted");
    if (pregate_first.value_or(0) > 0 && pregate_ == 0)
      throw std::runtime_error("--expert-pregate-first reads on pre-gating's queues and slots, and pre-gating is off here: "
                               "give --expert-pregate N too (it is on by default unless --expert-prefetch is given)");
    if (pregate_ > 0) prefetch = false;
    plan_pregate(plan, dense, pregate_first.value_or(pregate_));
    pass_experts_ = pass_pregate_count();
    const char* pass_env = std::getenv("GPUNVME_PREGATE_PASS");
    pass_token_path_ = pass_experts_ > 0 && pass_env && std::string(pass_env) == "all";
    // Default on when the cache can take a prefetch next to the fetch whose experts are in use.
    if (prefetch.value_or(fetcher_.can_prefetch()) && !fetcher_.can_prefetch())
      throw std::runtime_error("--expert-prefetch on needs an expert cache of at least " + std::to_string(2 * k_) +
                               " experts (2 x " + std::to_string(k_) + " routed); it holds " +
                               std::to_string(fetcher_.cache_capacity()) +
                               ": raise --ram-budget or --expert-cache, or use --expert-prefetch off");
    prefetch_ = prefetch.value_or(fetcher_.can_prefetch());
    if (overlap.value_or(false) && !fetcher_.can_overlap())
      throw std::runtime_error("--expert-overlap on needs stream memory waits (cuStreamWaitValue32), which this CUDA "
                               "driver does not offer: use --expert-overlap off");
    overlap_ = overlap.value_or(fetcher_.can_overlap());
    if (prefetch_ || pregate_) {
      int lo = 0, hi = 0;
      device::check_cuda(cudaDeviceGetStreamPriorityRange(&lo, &hi), "stream priorities");
      device::check_cuda(cudaStreamCreateWithPriority(&prefetch_stream_, cudaStreamNonBlocking, hi), "prefetch stream");
    }
    device::check_cuda(cudaMalloc(reinterpret_cast<void**>(&log_), ids_.size() * sizeof(uint32_t)), "cudaMalloc for the routing log");
    device::check_cuda(cudaMemset(log_, 0, ids_.size() * sizeof(uint32_t)), "routing log");
  }
  ~FetchedExperts() override {
    if (prefetch_stream_) {
      cudaStreamSynchronize(prefetch_stream_);
      cudaStreamDestroy(prefetch_stream_);
    }
    cudaFree(log_);
  }
  FetchedExperts(const FetchedExperts&) = delete;
  FetchedExperts& operator=(const FetchedExperts&) = delete;

  // The load check's event (GpuLoadCheck::expert_check_done): every write of the fetcher's slots and
  // tables (a fetch, a prefetch) waits for the check of the bytes it may overwrite. Null: none.
  void wait_before_writes(cudaEvent_t e) { writes_wait_ = e; }
  // The load check's events after it read each staging buffer (GpuLoadCheck::staged_check_done).
  void wait_before_staging(cudaEvent_t b0, cudaEvent_t b1) { staged_wait_[0] = b0, staged_wait_[1] = b1; }
  void fetch(uint32_t layer, const uint32_t* ids, uint32_t k, gpu_stream_t s) override {
    wait_writes(reinterpret_cast<cudaStream_t>(s));
    if (overlap_) fetcher_.fetch_overlapped(layer, ids, k, reinterpret_cast<stream::cuda_stream_t>(s));
    else fetcher_.fetch(layer, ids, k, reinterpret_cast<stream::cuda_stream_t>(s));
    device::check_cuda(cudaMemcpyAsync(log_ + size_t(layer) * k_, ids, k * sizeof(uint32_t), cudaMemcpyDeviceToDevice, s),
                       "routing log");
    logged_[layer] = true;
  }
  // Before layer `layer`'s kernels are enqueued: the experts the previous pass routed to at this layer,
  // read into the cache on the prefetch stream. The fetcher orders it after the previous fetch's reads
  // (so it reads layer `layer`'s log entry of the previous pass, and overlaps that fetch's expert
  // kernels and this layer's attention) and before this layer's fetch, which waits for it and finds
  // the predicted experts as hits.
  //
  // It does not wait for the load check (wait_writes): its one chain with the fetches (no pre-gating
  // submitter here) already orders it after this layer's previous fetch's reads, which waited for the
  // check before it, and it never evicts an expert of that previous fetch (a cache of >= 2 fetches:
  // gpu_expert_fetcher.h), so every slot it may take was checked already. Waiting for the latest check
  // too kept it from overlapping the previous layer's expert kernels.
  void prefetch(uint32_t layer) {
    if (!prefetch_ || !logged_[layer]) return;
    fetcher_.prefetch(layer, log_ + size_t(layer) * k_, k_, reinterpret_cast<stream::cuda_stream_t>(prefetch_stream_));
  }
  // Pre-gating (GpuForward::pregate): at a fetched layer, the next fetched layer of the same pass
  // whose router is resident; its top `pregate_` predicted experts are read on queues of their own
  // right after this layer's reads, while the drive would idle through this layer's expert kernels
  // and the layers up to the next fetch. That fetch finds the right ones as hits (waiting, expert by
  // expert, for any still being read) and starts its misses at once; a wrong one costs drive time
  // only past that idle stretch, which is why pregate_ is a count and not always k.
  //
  // The last fetched layer of a pass predicts the next pass's first (expert_pregate_first; default
  // pregate_): from this pass's routing there (one-token lag), as nothing of the next token exists
  // yet. Its reads fill the drive's longest idle stretch (the pass's tail, the token boundary, the
  // layers before the first fetch); a wrong one is cut when that fetch is placed (executor.h).
  //
  // A pass of several tokens (GpuForward::pregate_pass) predicts for all of them after the layer's last
  // fetch and reads up to pass_experts() of the union ahead, best first: what the cache holds beside
  // that fetch's experts, which the prefetch then never evicts (gpu_expert_fetcher.h), and at most k
  // (one prefetch). GPUNVME_PREGATE_PASS=0: none for such passes (the A/B switch); =all: passes fetched
  // token by token predict too (slower at 2 sequences: gpu_forward.cu's moe() says why it is not the default).
  bool pregate_target(uint32_t layer, PregateTarget& out) const override {
    if (!pregate_ || layer >= pregate_next_.size()) return false;
    if (layer == last_fetched_ && wrap_experts_ && logged_[first_fetched_]) {
      out = {first_fetched_, {}, wrap_experts_, log_ + size_t(first_fetched_) * k_, pass_experts_, pass_token_path_};
      return true;
    }
    if (!pregate_next_[layer].view) return false;
    out = {pregate_next_[layer].layer, *pregate_next_[layer].view, pregate_, nullptr, pass_experts_, pass_token_path_};
    return true;
  }
  uint32_t pass_experts() const { return pass_experts_; }
  gpu_stream_t pregate_stream() const override { return reinterpret_cast<gpu_stream_t>(prefetch_stream_); }
  void prefetch_predicted(uint32_t layer, const uint32_t* ids, uint32_t n) override {
    wait_writes(prefetch_stream_);
    fetcher_.prefetch(layer, ids, n, reinterpret_cast<stream::cuda_stream_t>(prefetch_stream_));
  }
  void wait_slice(uint32_t k, model::Projection proj, uint32_t slice, gpu_stream_t s) override {
    if (overlap_) fetcher_.wait_slice(k, proj, slice, reinterpret_cast<stream::cuda_stream_t>(s));
  }
  uint32_t part_slices(model::Projection proj) const override { return overlap_ ? fetcher_.part_slices(proj) : 1; }
  uint64_t slot_bytes() const override { return fetcher_.expert_slot_bytes(); }
  void before_staging(uint32_t buffer, gpu_stream_t s) override {
    if (buffer < 2 && staged_wait_[buffer])
      device::check_cuda(cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(s), staged_wait_[buffer], 0), "staging waits for the expert check");
  }
  bool after_placement(gpu_stream_t s) override {
    fetcher_.wait_placement(reinterpret_cast<stream::cuda_stream_t>(s));
    return true;
  }
  void consumed(uint32_t layer, gpu_stream_t s) override {
    fetcher_.consumed(layer, reinterpret_cast<stream::cuda_stream_t>(s));
  }
  bool prefetching() const { return prefetch_; }
  uint32_t pregating() const { return pregate_; }
  uint32_t pregating_first() const { return wrap_experts_; }
  bool overlapped() const { return overlap_; }
  uint64_t window_bytes() const { return fetcher_.read_window_bytes(); }
  uint64_t read_bytes() const { return fetcher_.max_command_bytes(); }
  // After a token's kernels ran: its routed ids into the lag counters.
  void end_token(cudaStream_t s) {
    device::check_cuda(cudaMemcpyAsync(ids_.data(), log_, ids_.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost, s), "routing log");
    device::check_cuda(cudaStreamSynchronize(s), "routing log");
    lag_.token(ids_);
  }
  const uint8_t* scratch() const override { return static_cast<const uint8_t*>(fetcher_.scratchpad().device()); }
  const stream::GpuFetchedExpert* experts() const override { return fetcher_.device_experts(); }
  const uint32_t* selection() const override { return fetcher_.device_selection(); }
  stream::FetcherMetrics metrics() const { return fetcher_.metrics(); }
  const stream::GpuExpertFetcher& fetcher() const { return fetcher_; }
  stream::PrefetchMetrics prefetch_metrics() const { return fetcher_.prefetch_metrics(); }
  host::RecoveryStats recovery() const { return fetcher_.recovery(); }
  const LagCounts& lag() const { return lag_.counts(); }
  void wait() { fetcher_.wait(); }

 private:
  // The predicted experts per fetched layer: as asked, or the default (max(1, k / 2) where no prefetch
  // was asked for), with or without a RAM expert cache: with one, the one-token-lag prefetch finds the
  // previous token's experts still cached and reads nothing, while pre-gating reads this token's
  // (Qwen3-235B-A22B 22G:32G pcie5: 75 % of the bound without, 94 % with 4 of 8; H200, session 21).
  // Its reads need queues of their own from `first_qid` on: a controller that grants too few turns
  // the default off and refuses an explicit count.
  static uint32_t pregate_count(std::span<host::Controller* const> ctrls, const ModelOnDevice& m, uint32_t first_qid,
                                std::optional<bool> prefetch, std::optional<uint32_t> asked) {
    uint32_t granted = UINT32_MAX;  // a striped set: every member needs the queues
    for (const host::Controller* c : ctrls) granted = std::min<uint32_t>(granted, c->io_queues_granted());
    const bool room = first_qid <= granted;
    if (asked && *asked > 0 && !room)
      throw std::runtime_error("--expert-pregate reads on I/O queues of its own, from queue " + std::to_string(first_qid) +
                               ", and the controller granted " + std::to_string(granted) +
                               ": use fewer queues, or --expert-pregate 0");
    if (asked) return *asked;
    return !prefetch && room ? std::max(1u, m.config.n_expert_used / 2) : 0;
  }
  // Pre-gating needs a cache of two fetches (the fetch whose experts are in use, and the prediction):
  // with a RAM budget of 0 that is 2k slots of pinned memory beside the budget (k without it).
  static stream::FetcherOptions fetcher_options(const ModelOnDevice& m, uint64_t cache_bytes, uint32_t pregate,
                                                std::optional<uint64_t> window, uint64_t read_bytes) {
    if (read_bytes < kMinExpertReadBytes || read_bytes > kMaxExpertReadBytes)
      throw std::runtime_error("the expert fetcher's largest read must be 4 KiB to 1 GiB (got " + std::to_string(read_bytes) + ")");
    stream::FetcherOptions o{.max_experts_per_fetch = m.config.n_expert_used, .cache_bytes = cache_bytes,
                             .min_cache_experts = pregate ? 2 * m.config.n_expert_used : 0,
                             .max_command_bytes = uint32_t(read_bytes)};
    if (window) o.read_window_bytes = *window;
    // A prediction the fetch proves wrong stops reading: it then costs the drive only its reads in flight
    // (Mixtral 22G:0 pcie4 94 -> 95 %, pcie5 90 -> 91 %; docs/performance.md, session 14).
    o.cut_wrong_prefetches = pregate > 0;
    return o;
  }
  // Pre-gating for passes of several tokens (pregate_target): the union's experts read ahead at most.
  uint32_t pass_pregate_count() const {
    const char* v = std::getenv("GPUNVME_PREGATE_PASS");
    if (!pregate_ || (v && std::string(v) == "0")) return 0;
    const uint32_t cap = fetcher_.cache_capacity();
    return cap > k_ ? std::min(k_, cap - k_) : 0;
  }
  // One expert's bytes for each layer whose experts are fetched, 0 for the others.
  static std::vector<uint64_t> fetched_expert_bytes(const ResidencyPlan& p) {
    std::vector<uint64_t> b(p.layers.size(), 0);
    for (size_t i = 0; i < b.size(); ++i)
      if (!p.layers[i].experts_in_vram && p.bytes[i].n_expert) b[i] = p.bytes[i].experts / p.bytes[i].n_expert;
    return b;
  }

  // For each fetched layer, the next fetched layer of the pass and its dense weights when resident.
  // `first`: the next pass's first fetched layer's experts read ahead at the last (0: not).
  void plan_pregate(const ResidencyPlan& plan, const std::vector<std::optional<WeightView>>& dense, uint32_t first) {
    pregate_next_.assign(plan.layers.size(), {});
    uint32_t next = ~0u;
    for (uint32_t i = uint32_t(plan.layers.size()); i-- > 0;) {
      const bool fetched = plan.bytes[i].n_expert && !plan.layers[i].experts_in_vram;
      if (!fetched) continue;
      if (next != ~0u && next < dense.size() && dense[next]) pregate_next_[i] = {next, dense[next]};
      if (next == ~0u) last_fetched_ = i;
      next = i;
    }
    first_fetched_ = next;
    wrap_experts_ = first_fetched_ == ~0u ? 0 : first;
  }
  struct NextFetched {
    uint32_t layer = 0;
    std::optional<WeightView> view;  // none: no later fetched layer in the pass, or its router is not resident
  };

  // One per member of a striped set (one namespace: one): the fetcher's queues and, with pre-gating,
  // queues of their own after them: the next fetch starts its reads while the prediction's last ones
  // still run (GpuExpertFetcher's concurrent prefetches).
  struct MemberQueues {
    std::unique_ptr<stream::GpuQueues> queues, pf_queues;
    std::unique_ptr<stream::GpuSubmitter> submitter, pf_submitter;  // pre-gating's: null without it
  };
  static std::vector<MemberQueues> open_queues(std::span<host::Controller* const> ctrls, uint32_t first_qid,
                                               uint32_t queues, bool pregate) {
    std::vector<MemberQueues> out(ctrls.size());
    for (size_t i = 0; i < ctrls.size(); ++i) {
      host::Controller& c = *ctrls[i];
      out[i].queues = std::make_unique<stream::GpuQueues>(c, uint16_t(first_qid), queues, 256);
      out[i].submitter = std::make_unique<stream::GpuSubmitter>(c, out[i].queues->raw, 1);
      if (!pregate) continue;
      out[i].pf_queues = std::make_unique<stream::GpuQueues>(c, uint16_t(first_qid + queues), queues, 256);
      out[i].pf_submitter = std::make_unique<stream::GpuSubmitter>(c, out[i].pf_queues->raw, 1);
    }
    return out;
  }
  std::vector<stream::GpuFetcherMember> fetcher_members(std::span<host::Controller* const> ctrls) const {
    std::vector<stream::GpuFetcherMember> out;
    for (size_t i = 0; i < ctrls.size(); ++i)
      out.push_back({ctrls[i], member_[i].submitter.get(), member_[i].pf_submitter.get()});
    return out;
  }

  uint32_t pregate_ = 0;  // predicted experts read ahead per fetched layer (0: off); first: the queues depend on it
  std::vector<MemberQueues> member_;
  stream::GpuExpertFetcher fetcher_;
  uint32_t k_;
  ExpertLag lag_;
  std::vector<uint32_t> ids_;  // host copy of the log (not pinned: a few hundred bytes per token)
  std::vector<bool> logged_;   // [layer]: the log holds a fetch of it (a prediction exists)
  uint32_t* log_ = nullptr;    // device: [layer][k] routed ids of the current token
  bool prefetch_ = false;
  std::vector<NextFetched> pregate_next_;      // [layer]
  uint32_t first_fetched_ = ~0u, last_fetched_ = ~0u;  // of a pass (~0u: none)
  uint32_t wrap_experts_ = 0;  // the next pass's first fetched layer, predicted at the last (0: not)
  uint32_t pass_experts_ = 0;  // a pass of several tokens: its union's experts read ahead at most (0: none)
  bool pass_token_path_ = false;  // and passes fetched token by token too (GPUNVME_PREGATE_PASS=all)
  bool overlap_ = false;  // fetch_overlapped + wait_slice (gpu_expert_fetcher.h)
  cudaStream_t prefetch_stream_ = nullptr;
  cudaEvent_t writes_wait_ = nullptr;  // not owned
  cudaEvent_t staged_wait_[2] = {nullptr, nullptr};  // not owned

  void wait_writes(cudaStream_t s) {
    if (writes_wait_) device::check_cuda(cudaStreamWaitEvent(s, writes_wait_, 0), "fetch waits for the expert check");
  }
};

class GpuExecutor final : public Executor {
 public:
  GpuExecutor(std::span<host::Controller* const> ctrls, const ModelOnDevice& m, uint32_t n_ctx, const GpuExecOptions& o)
      : m_(m), ctrls_(ctrls.begin(), ctrls.end()), seqs_(std::max(1u, o.max_seqs), n_ctx) {
    const size_t want = m.stripe ? m.stripe->members : 1;
    if (ctrls_.size() != want)
      throw std::runtime_error("the GPU executor got " + std::to_string(ctrls_.size()) + " controller(s) for a model on " +
                               std::to_string(want) + " namespace(s)");
    host::Controller& c = *ctrls_[0];
    if (o.stage) pipe_ = *o.stage, range_ = o.stage->layers, first_qid_ = o.stage->first_qid;
    else range_ = {0, m.config.n_layer};
    if (o.gpu_ids.size() == 1) listed_gpu_ = o.gpu_ids[0];
    check_ = std::make_unique<LoadCheck>(m, o.verify, ModelReaderOptions{.gpu_mapped = true, .controllers = ctrls_});
    open_streams();
    load_globals();
    kv_ = KvCacheShape{range_.begin, range_.end, kv_slots(o, n_ctx), o.kv_in_host};  // its own layers
    seqs_ = SeqSlots(kv_.seqs, n_ctx);
    // A plan of given budgets (or --resident N) is made before the forward pass's buffers, so that they
    // are allocated for what it runs: the grouped MoE's only where experts are fetched or a pass of the
    // fast kernels can group resident ones. The default budget is what is free after them.
    const bool early_plan = o.resident_layers || o.vram_budget;
    if (early_plan) make_plan(o, n_ctx);
    fwd_ = std::make_unique<GpuForward>(m.config, m.weights, n_ctx, globals(), reinterpret_cast<gpu_stream_t>(compute_), o.max_batch,
                                        o.fast_prompt, kv_, /*experts_fetched=*/!early_plan || plan_.any_fetched_experts());
    if (!early_plan) make_plan(o, n_ctx);
    load_tiers(o);
    finish_host_checks(o);  // a chunk that does not match stops here, before any GPU-issued read
    // Experts fetched from a striped set: every member's controller reads its pieces (gpu_expert_fetcher.h).
    if (plan_.any_fetched_experts())
      experts_ = std::make_unique<FetchedExperts>(ctrls_, m_, plan_, first_qid_ + o.queues, o.queues,
                                                  o.expert_cache_bytes.value_or(plan_.expert_cache_bytes), o.expert_prefetch,
                                                  o.expert_pregate, o.expert_pregate_first, vram_views(),
                                                  o.expert_overlap, o.expert_window_bytes,
                                                  o.expert_read_bytes.value_or(kExpertReadBytes));
    if (plan_.count(Tier::kNvme) > 0 && o.nvme_source) {
      std::vector<PackedRanges> layers;
      for (const LayerWeights& l : m_.weights.layers)
        if (plan_.layers[l.index].dense == Tier::kNvme) layers.push_back(dense_part(m_, l));
      for (const PackedRanges& r : layers) streamer_bytes_per_step_ += r.file_bytes();
      nvme_source_ = o.nvme_source(std::move(layers));
    } else if (plan_.count(Tier::kNvme) > 0) {
      open_streamer(c, o);
    }
    if (check_->on())
      gpu_check_ = std::make_unique<GpuLoadCheck>(*check_, m_, streamer_.get(), experts_ ? &experts_->fetcher() : nullptr,
                                                  m_.config.n_expert_used);
    if (experts_ && gpu_check_) {
      experts_->wait_before_writes(gpu_check_->expert_check_done());
      experts_->wait_before_staging(gpu_check_->staged_check_done(0), gpu_check_->staged_check_done(1));
    }
    const char* graph_env = std::getenv("GPUNVME_LLM_DECODE_GRAPH");  // "0": the A/B switch, off
    graph_on_ = graph_possible(o) && !(graph_env && std::string(graph_env) == "0");
    if (!pipe_.link && (profile_ = DecodeProfile::from_env())) fwd_->time_pass_end(profile_->end_event());  // one GPU
    const char* chain_env = std::getenv("GPUNVME_LLM_CHAIN");  // "0": the A/B switch, off
    chain_on_ = o.decode_chain && !(chain_env && std::string(chain_env) == "0") && !pipe_.link && range_.begin == 0 &&
                range_.end == m_.config.n_layer && !streamer_ && !experts_ && !ram_ && !nvme_source_;
  }
  ~GpuExecutor() override {
    try {
      finish();
    } catch (...) {
    }
    gpu_check_.reset();
    fwd_.reset();
    nvme_source_.reset();
    ram_.reset();
    experts_.reset();
    streamer_.reset();
    submitter_.reset();
    members_.clear();
    if (io_stream_) cudaStreamDestroy(io_stream_);
    if (compute_) cudaStreamDestroy(compute_);
  }

  std::span<const float> pass(std::span<const PassToken> tokens) override {
    drain_chain();
    enqueue_pass(tokens);
    const std::span<const float> logits = finish_pass(tokens.size());
    if (profile_) profile_->ended();
    return logits;
  }

  // The pass's logit row reduced on the device (GpuForward::pass_pick) where this GPU has the head;
  // the checks of finish_pass after it, as after the logits.
  GreedyPick pass_greedy(std::span<const PassToken> tokens) override {
    if (range_.end != m_.config.n_layer || logit_rows(tokens) != 1) return Executor::pass_greedy(tokens);
    drain_chain();
    enqueue_pass(tokens);
    const GreedyPick p = fwd_->pass_pick();
    end_pass(tokens.size());
    if (profile_) profile_->ended();
    return p;
  }

  // Chained greedy passes (Executor::submit_greedy): only over layers all in this GPU's memory, where a
  // pass needs nothing of the host between its enqueue and its pick (no streamed or fetched bytes to
  // check, no expert log to read).
  bool chains() const override { return chain_on_; }
  void submit_greedy(PassToken t, bool previous_pick) override {
    if (!chain_on_) return Executor::submit_greedy(t, previous_pick);
    if (chained_ == 2) throw std::logic_error("submit_greedy: two passes are outstanding already");
    if (previous_pick && !chain_picked_) throw std::logic_error("submit_greedy: no greedy pick before this pass to take its token from");
    t.logits = true;
    enqueue_pass(std::span(&t, 1), previous_pick);
    fwd_->enqueue_pick(chain_slot_);
    chain_slot_ ^= 1, ++chained_, chain_picked_ = true;
  }
  GreedyPick collect_greedy() override {
    if (!chain_on_) return Executor::collect_greedy();
    if (chained_ == 0) throw std::logic_error("collect_greedy: no pass outstanding");
    const GreedyPick p = fwd_->wait_pick(chain_slot_ ^ (chained_ & 1));  // the oldest's slot
    --chained_;
    end_pass(1);
    return p;
  }
  void drain_chain() {
    while (chained_ > 0) collect_greedy();
    chain_picked_ = false;
  }

  // The pass's embeddings (or the previous GPU's hidden state) and its layers, enqueued; with
  // `picked`, its one token's id is the last greedy pick's, on the device (GpuForward::embed_picked).
  void enqueue_pass(std::span<const PassToken> tokens, bool picked = false) {
    seqs_.check(tokens, fwd_->max_batch());  // a refused pass changes nothing
    check_logit_rows(tokens, fwd_->max_logit_rows());
    if (profile_ && tokens.size() == 1 && !chain_on_) profile_->begin(compute_);
    else if (profile_) profile_->other_pass();  // chained passes overlap: their events would interleave
    if (picked) {
      fwd_->embed_picked(tokens[0]);
    } else if (range_.begin == 0) {
      fwd_->embed(tokens);
    } else {  // a later GPU of several: the previous one's hidden state (pipeline_stage.h)
      fwd_->set_pass(tokens);
      pipe_.link->receive(fwd_->hidden(), tokens.size() * m_.config.n_embd, reinterpret_cast<gpu_stream_t>(compute_));
    }
    seqs_.commit(tokens);  // the cache rows are (being) overwritten from here on
    if (profile_ && tokens.size() == 1) profile_->embedded(compute_);
    if (tokens.size() == 1 && graph_on_) {
      resident_graphed();
    } else {
      layers(tokens.size());
    }
    if (profile_ && tokens.size() == 1) profile_->layered(compute_);
  }

  // One token over layers all in GPU memory: a replay of the captured layers (compute/gpu_graph.h). The
  // first such pass runs them the ordinary way (each kernel's one-time host setup happens outside any
  // capture), the second captures them; where a capture fails, every pass runs them the ordinary way.
  void resident_graphed() {
    auto enqueue = [&] {
      for (const LayerWeights& l : m_.weights.layers) fwd_->layer(l, vram_[l.index]->view(), nullptr);
    };
    if (graph_.ready() || (graph_warm_ && graph_.capture(reinterpret_cast<gpu_stream_t>(compute_), enqueue))) {
      graph_.launch(reinterpret_cast<gpu_stream_t>(compute_));
      ++graph_replays_;
      return;
    }
    graph_on_ = !graph_warm_;  // a failed capture: no more attempts
    graph_warm_ = true;
    enqueue();
  }

  // Whether one-token passes replay a graph: asked for, and every layer (its experts too) in GPU memory
  // of this one GPU, no per-pass host work between the layers (the first-read checks concern streamed
  // and fetched bytes only, none here).
  bool graph_possible(const GpuExecOptions& o) const {
    if (!o.decode_graph || pipe_.link || range_.begin != 0 || range_.end != m_.config.n_layer || nvme_source_ || ram_ || streamer_ || experts_)
      return false;
    for (const LayerWeights& l : m_.weights.layers)
      if (plan_.layers[l.index].dense != Tier::kVram || !plan_.layers[l.index].experts_in_vram || !vram_[l.index]) return false;
    return true;
  }

  void layers(size_t n_tokens) {
    for (const LayerWeights& l : m_.weights.layers) {
      if (!range_.contains(l.index)) continue;  // another GPU's
      lead_.before_layer();
      const LayerPlacement& at = plan_.layers[l.index];
      ExpertSource* experts = at.experts_in_vram ? nullptr : experts_.get();
      if (experts) experts_->prefetch(l.index);
      if (at.dense == Tier::kVram) {
        fwd_->layer(l, vram_[l.index]->view(), experts);
      } else if (at.dense == Tier::kRam) {
        fwd_->layer(l, ram_->acquire(compute_), experts);
        ram_->release(compute_);
      } else if (nvme_source_) {  // a baseline's way of reading the NVMe tier
        fwd_->layer(l, nvme_source_->acquire(compute_), experts);
        nvme_source_->release(compute_);
      } else {
        const uint32_t slot = uint32_t(consumed_ % slots_);
        const stream::SlotView v = streamer_->wait(slot, reinterpret_cast<stream::cuda_stream_t>(compute_));
        if (gpu_check_) gpu_check_->streamed(stream_index_[l.index], v, compute_);  // the first read of it only
        const PackedRanges& held = slot_held_[stream_index_[l.index]];
        if (n_tokens > kBatchTileTokens) {  // copied once; the slot is free before the compute
          const uint8_t* weights = stage_streamed(v);
          streamer_->release(slot, reinterpret_cast<stream::cuda_stream_t>(compute_));
          fwd_->layer(l, {weights, &held}, experts);
        } else {  // read in place through the link
          fwd_->layer(l, {static_cast<const uint8_t*>(v.device), &held}, experts);
          streamer_->release(slot, reinterpret_cast<stream::cuda_stream_t>(compute_));
        }
        ++consumed_;
        begin_next();
      }
      if (experts && gpu_check_) gpu_check_->experts(compute_, fwd_->last_staged());  // its experts' parts not checked before
      lead_.after_layer(compute_);
    }
  }

  std::span<const float> finish_pass(size_t n_tokens) {
    std::span<const float> logits;  // none where the next GPU goes on
    if (range_.end == m_.config.n_layer) {
      logits = fwd_->pass_logits();
    } else {
      pipe_.link->send(fwd_->hidden(), n_tokens * m_.config.n_embd, reinterpret_cast<gpu_stream_t>(compute_));
      pipe_.link->wait_sent(reinterpret_cast<gpu_stream_t>(compute_));
    }
    end_pass(n_tokens);
    return logits;
  }
  // After the pass's results reached the host.
  void end_pass(size_t n_tokens) {
    // The logits (or the pick) are on the host, so every layer of this pass was consumed: a load that failed (its
    // retries spent, or the controller lost) ends the generation here, not at finish(), so no text is
    // ever printed from a layer that did not arrive.
    if (streamer_) streamer_->throw_if_failed();
    // And every byte this pass read for the first time matched the deploy record (gpu_load_check.h).
    if (gpu_check_) gpu_check_->end_pass();
    // The lag counters compare consecutive tokens' routing: one-token passes only (a batched pass logs
    // only its last token's ids, and a speculative pass's last token may be a rejected draft).
    if (experts_ && n_tokens == 1) experts_->end_token(compute_);
  }
  uint32_t max_batch() const override { return fwd_->max_batch(); }
  uint32_t max_logit_rows() const override { return fwd_->max_logit_rows(); }
  uint32_t max_seqs() const override { return seqs_.count(); }
  void end_sequence(uint32_t seq) override { seqs_.free(seq); }

  void finish() override {
    if (finished_) return;
    drain_chain();  // a pass run ahead of an error's end
    finished_ = true;
    auto comp = reinterpret_cast<stream::cuda_stream_t>(compute_);
    if (streamer_) {
      while (consumed_ < begun_) {  // loads that ran ahead of the last token: drain them
        const uint32_t slot = uint32_t(consumed_++ % slots_);
        streamer_->wait(slot, comp);
        streamer_->release(slot, comp);
      }
      streamer_->sync();
    }
    if (ram_) ram_->sync();
    if (nvme_source_) nvme_source_->sync();
    if (experts_) experts_->wait();  // throws the first failed expert read
    device::check_cuda(cudaStreamSynchronize(compute_), "compute stream");
    if (gpu_check_) gpu_check_->end_pass();
  }

  ExecStats stats() const override {
    ExecStats s;
    s.plan = own_plan();
    s.resident_layers = s.plan.count(Tier::kVram);
    s.ram_layers = s.plan.count(Tier::kRam);
    s.streamed_layers = s.plan.count(Tier::kNvme);
    s.vram_budget = vram_budget_;
    s.graph_replays = graph_replays_;
    s.bytes_per_step = streamer_bytes_per_step_;
    for (const auto* g : {&embd_, &norm_, &out_}) s.resident_bytes += *g ? (*g)->held.bytes : 0;
    for (const auto& v : vram_) s.resident_bytes += v ? v->held.bytes : 0;
    if (ram_) {
      s.ram_bytes = ram_->host_bytes();
      s.ram_bytes_per_step = ram_->bytes_per_token();
      s.ram_copied_bytes = ram_->copied_bytes();
    }
    if (streamer_) {
      s.stream_slots = slots_;
      s.slot_bytes = streamer_->slot_bytes();
      const auto& st = streamer_->stats();
      s.streamed_bytes = st.bytes;
      s.io_seconds = st.io_seconds;
      s.stall_seconds = st.wait_seconds;
      s.recovery += streamer_->recovery();
    }
    if (experts_) {
      s.has_experts = true;
      s.experts = experts_->metrics();
      s.lag = experts_->lag();
      s.expert_prefetch = experts_->prefetching();
      s.expert_pregate = experts_->pregating();
      s.expert_pregate_first = experts_->pregating_first();
      s.expert_pregate_pass = experts_->pass_experts();
      s.pregate_passes = fwd_->pass_pregates();
      s.expert_overlap = experts_->overlapped();
      s.expert_window_bytes = experts_->window_bytes();
      s.expert_read_bytes = experts_->read_bytes();
      s.prefetch = experts_->prefetch_metrics();
      s.recovery += experts_->recovery();
    }
    s.verify = check_->stats();
    if (listed_gpu_) s.gpus = {gpu_share(s, *listed_gpu_, range_)};  // --gpus device=N: its report names the GPU
    return s;
  }

  std::string describe() const override {
    const std::string moe =
        !experts_                 ? ""
        : experts_->pregating()   ? ", routed experts fetched after routing, the best " + std::to_string(experts_->pregating()) +
                                      " predicted by pre-gating read ahead"
        : experts_->prefetching() ? ", routed experts fetched after routing, prefetched by one-token lag"
                                  : ", routed experts fetched after routing (no prefetch)";
    char b[640];
    std::snprintf(b, sizeof b,
                  "GPU executor%s: %u layers in GPU memory, %u in pinned RAM (copied per token), %u streamed per token through "
                  "%u slots by GPU-issued NVMe reads (%zu queues)%s; KV cache and activations %.1f MB%s",
                  pipe_.link ? (" of layers " + std::to_string(range_.begin) + "-" + std::to_string(range_.end - 1)).c_str() : "",
                  own_plan().count(Tier::kVram), own_plan().count(Tier::kRam), own_plan().count(Tier::kNvme), streamer_ ? slots_ : 0,
                  queues_ ? queues_->raw.size() : size_t(0), moe.c_str(), fwd_->device_bytes() / 1e6, kv_where().c_str());
    return b;
  }

 private:
  // The plan of the layers this GPU runs (of several GPUs: its range's alone).
  const ResidencyPlan& own_plan() const { return pipe_.link ? range_plan_ : plan_; }

  // The plan: --resident N, or the budgets (VRAM by default: what the GPU has free now, after the
  // globals, KV cache and activations, less the RAM tier's GPU buffers and a reserve for the CUDA
  // context, the queues and the fetcher's tables).
  // Where the KV cache is when not in GPU memory (said after the GPU's bytes).
  std::string kv_where() const {
    if (!fwd_->kv_in_host()) return "";
    char b[96];
    std::snprintf(b, sizeof b, " (the KV cache, %.1f MB, in pinned host memory)", fwd_->kv_bytes() / 1e6);
    return b;
  }

  // The VRAM budget when none is given: what the GPU has free now, less the reserve and the buffers of
  // the RAM tier and of long passes' streamed-layer copy.
  uint64_t free_vram_budget(const GpuExecOptions& o, const std::vector<LayerBytes>& bytes) const {
    size_t free = 0, total = 0;
    device::check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    const uint64_t reserve = vram_kept_back(bytes, o.slots, o.max_batch);
    return free > reserve ? free - reserve : 0;
  }

  // This GPU's layers' bytes (of several GPUs: its range's alone).
  std::vector<LayerBytes> own_layer_bytes() const {
    const std::vector<LayerBytes> all = layer_bytes(m_);
    return std::vector<LayerBytes>(all.begin() + range_.begin, all.begin() + range_.end);
  }

  // The sequence slots: GpuExecOptions::max_seqs, or (0: auto) what the VRAM budget gives for this GPU's
  // layers (auto_kv_slots' rule), at most max_batch and kMaxAutoSlots. The default budget is taken
  // before the activations are allocated (their bytes are not known yet): the reserve covers them.
  uint32_t kv_slots(const GpuExecOptions& o, uint32_t n_ctx) const {
    if (o.max_seqs) return o.max_seqs;
    if (o.stage)  // each GPU would size its own: the stages must agree
      throw std::invalid_argument("--max-seqs auto over several GPUs is not supported yet: give a count");
    const std::vector<LayerBytes> bytes = own_layer_bytes();
    const uint64_t budget = o.vram_budget ? *o.vram_budget : free_vram_budget(o, bytes);
    return plan_kv(m_.config, bytes, n_ctx, 0, o.kv_in_host, budget, std::min(kMaxAutoSlots, std::max(1u, o.max_batch))).slots;
  }

  void make_plan(const GpuExecOptions& o, uint32_t n_ctx) {
    const std::vector<LayerBytes> bytes = layer_bytes(m_);
    const KvPlan kv{kv_.seqs, n_ctx, kv_cache_bytes(m_.config, kv_, n_ctx), kv_.host, o.max_seqs == 0};
    if (o.resident_layers && pipe_.link) {
      range_plan_ = plan_range_first(bytes, range_, *o.resident_layers);
      range_plan_.kv = kv;
      plan_ = range_in_model(range_plan_, range_, m_.config.n_layer);
      return;
    }
    if (o.resident_layers) {
      plan_ = plan_first_layers(bytes, *o.resident_layers);
      plan_.kv = kv;
      return;
    }
    Budgets b{.vram = 0, .ram = o.ram_budget};
    // The default: what is free now, the VRAM cache (allocated already) given back to the budget the
    // plan then takes it from.
    b.vram = o.vram_budget ? *o.vram_budget : free_vram_budget(o, bytes) + (kv.host ? 0 : kv.bytes);
    vram_budget_ = b.vram;
    if (pipe_.link) {  // this GPU's layers alone, by its own budget
      range_plan_ = plan_range(bytes, range_, b, kv);
      plan_ = range_in_model(range_plan_, range_, m_.config.n_layer);
      return;
    }
    plan_ = plan_residency(bytes, b, kv);
  }

  // [layer]: where the VRAM tier's copy of it is (its dense part, or all of it), or none.
  std::vector<std::optional<WeightView>> vram_views() const {
    std::vector<std::optional<WeightView>> v(vram_.size());
    for (size_t i = 0; i < v.size(); ++i)
      if (vram_[i]) v[i] = vram_[i]->view();
    return v;
  }

  void load_tiers(const GpuExecOptions& o) {
    vram_.resize(m_.config.n_layer);
    std::vector<PackedRanges> ram;
    for (const LayerWeights& l : m_.weights.layers) {
      const LayerPlacement& at = plan_.layers[l.index];
      if (at.dense == Tier::kNvme || !range_.contains(l.index)) continue;
      PackedRanges r = at.experts_in_vram ? PackedRanges::span(l.begin, l.end) : dense_part(m_, l);
      if (at.dense == Tier::kVram) vram_[l.index] = std::make_unique<DeviceCopy>(*check_, std::move(r));
      else ram.push_back(std::move(r));
    }
    if (!ram.empty()) ram_ = std::make_unique<RamTier>(m_, std::move(ram), ram_tier_depth(o.slots), check_.get());
  }

  // The end of start's checks (load_check.h): what the GPU readers will check later is planned (the
  // streamed layers' extents, as open_streamer gives them to the streamer; the fetched experts' slices;
  // the bench's mmap loader's ranges too, which nothing checks), the bytes no reader reads are read and
  // checked on the host, and every host CRC is waited for. The GPU readers' checks are set up once
  // they exist (GpuLoadCheck), for the pieces still pending.
  void finish_host_checks(const GpuExecOptions& o) {
    const uint64_t start = m_.map->start_lba() * m_.lba_size();
    const auto extents = plan::layer_extents(*m_.map, /*skip_experts=*/m_.config.is_moe());
    for (const LayerWeights& l : m_.weights.layers) {
      const LayerPlacement& at = plan_.layers[l.index];
      if (at.dense == Tier::kNvme && o.nvme_source)
        for (const PackedRanges::Piece& q : dense_part(m_, l).pieces) check_->plan(q.begin, q.end - q.begin);
      else if (at.dense == Tier::kNvme)
        for (const model::Extent& e : extents[l.index]) check_->plan(e.first_lba * m_.lba_size() + e.byte_in_first - start, e.byte_length);
    }
    if (plan_.any_fetched_experts())
      for (const model::ExpertExtent& e : m_.map->experts())
        if (!plan_.layers.at(e.layer).experts_in_vram) check_->plan(e.file_offset, e.extent.byte_length);
    check_->finish_start();
  }

  void open_streams() {
    int lo = 0, hi = 0;
    device::check_cuda(cudaDeviceGetStreamPriorityRange(&lo, &hi), "stream priorities");
    device::check_cuda(cudaStreamCreateWithPriority(&io_stream_, cudaStreamNonBlocking, hi), "I/O stream");
    device::check_cuda(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "compute stream");
  }

  // The embeddings where the pass starts, the output norm and head where it ends (one GPU: both).
  void load_globals() {
    const ModelWeights& w = m_.weights;
    const bool first = range_.begin == 0, last = range_.end == m_.config.n_layer;
    const bool tied = w.tied();
    if (first || (last && tied)) embd_ = std::make_unique<DeviceCopy>(*check_, w.token_embd);
    if (last) norm_ = std::make_unique<DeviceCopy>(*check_, w.output_norm);
    if (last && !tied) out_ = std::make_unique<DeviceCopy>(*check_, w.output);
  }
  GlobalWeights globals() const {
    const ModelWeights& w = m_.weights;
    // The head is the embedding table only when tied; a first GPU that is not the last has no head.
    return {embd_ ? embd_->at(w.token_embd) : nullptr, norm_ ? norm_->at(w.output_norm) : nullptr,
            out_ ? out_->at(w.output) : (embd_ && w.tied()) ? embd_->at(w.output) : nullptr};
  }

  // The streamed layers' plans, and where each layer's tensors sit in a slot.
  void open_streamer(host::Controller& c, const GpuExecOptions& o) {
    // MoE: the streamer reads the dense part of a layer; the routed experts come from the fetcher.
    auto all = plan::layer_extents(*m_.map, /*skip_experts=*/m_.config.is_moe());
    std::vector<std::vector<model::Extent>> streamed;
    stream_index_.assign(m_.config.n_layer, UINT32_MAX);
    for (uint32_t i = 0; i < m_.config.n_layer; ++i) {
      if (plan_.layers[i].dense != Tier::kNvme) continue;
      stream_index_[i] = uint32_t(streamed.size());
      streamed.push_back(all[i]);
    }
    const uint32_t n = uint32_t(streamed.size());
    StreamSlotInputs want = slot_costs(c, streamed);
    want.asked = o.slots, want.pipeline = pipe_.link != nullptr, want.streamed_layers = n, want.host_share = pipe_.slot_host_bytes;
    slots_ = stream_slots(want);
    if (m_.stripe) {
      open_striped_streamer(o, std::move(streamed));
    } else {
      queues_ = std::make_unique<stream::GpuQueues>(c, uint16_t(first_qid_), o.queues, 256);
      submitter_ = std::make_unique<stream::GpuSubmitter>(c, queues_->raw, 1);
      streamer_ = std::make_unique<stream::LayerStreamer>(c, *submitter_, std::move(streamed), stream::StreamerOptions{.slots = slots_});
    }
    for (uint32_t i = 0; i < m_.config.n_layer; ++i)
      if (stream_index_[i] != UINT32_MAX) {
        slot_held_.push_back(locate_layer(m_.weights.layers[i], stream_index_[i]));
        streamer_bytes_per_step_ += slot_held_.back().file_bytes();
      }
    n_streamed_ = n;
    for (uint32_t k = 0; k < slots_; ++k) begin_next();
  }

  // What one streaming slot costs (stream_slots' inputs): its pinned host bytes, as the streamer sizes
  // them (stream::slot_bytes_for, with the streamer's default options the executor uses), and its command
  // templates in GPU memory, every streamed layer's commands (an extent's blocks cut by the streamer's
  // per-command limit; a striped set's members share them out).
  StreamSlotInputs slot_costs(const host::Controller& c, const std::vector<std::vector<model::Extent>>& streamed) const {
    const stream::StreamerOptions so;
    const uint64_t page = c.page_bytes();
    const uint64_t per_command = stream::command_block_limit(c, so.nsid, so.max_command_bytes);
    StreamSlotInputs in;
    in.slot_bytes = stream::slot_bytes_for(streamed, uint32_t(m_.lba_size()), so.align ? so.align : page, page);
    for (const std::vector<model::Extent>& l : streamed)
      for (const model::Extent& e : l) in.template_bytes += (e.lba_count + per_command - 1) / per_command * sizeof(nvme::SubmissionEntry);
    return in;
  }

  // A striped set: per member its GPU queues and submitter, and (members 1..N-1) an I/O stream of its
  // own, highest priority like io_stream_: one submitter's kernels run one after another, and the
  // members must read at once (runtime/stream/striped_submitter.h). Member 0 reads on io_stream_.
  void open_striped_streamer(const GpuExecOptions& o, std::vector<std::vector<model::Extent>> streamed) {
    int lo = 0, hi = 0;
    device::check_cuda(cudaDeviceGetStreamPriorityRange(&lo, &hi), "stream priorities");
    std::vector<stream::StripedMember> sm;
    for (size_t i = 0; i < ctrls_.size(); ++i) {
      auto mem = std::make_unique<StripeMember>();
      mem->queues = std::make_unique<stream::GpuQueues>(*ctrls_[i], uint16_t(first_qid_), o.queues, 256);
      mem->submitter = std::make_unique<stream::GpuSubmitter>(*ctrls_[i], mem->queues->raw, 1);
      if (i > 0) device::check_cuda(cudaStreamCreateWithPriority(&mem->io, cudaStreamNonBlocking, hi), "member I/O stream");
      sm.push_back({ctrls_[i], mem->submitter.get(), reinterpret_cast<stream::cuda_stream_t>(mem->io)});
      members_.push_back(std::move(mem));
    }
    streamer_ = std::make_unique<stream::LayerStreamer>(std::move(sm), *m_.stripe, std::move(streamed),
                                                        stream::StreamerOptions{.slots = slots_});
  }

  // Where the layer's dense part (dense_part) lies in a slot, as the streaming plan placed its extents:
  // the same in every slot (checked), each piece unbroken. The plan and dense_part skip the same tensors
  // (model::parse_expert_name), so every piece is there.
  PackedRanges locate_layer(const LayerWeights& l, uint32_t streamed_index) const {
    PackedRanges held = dense_part(m_, l);
    held.bytes = streamer_->slot_bytes();
    for (PackedRanges::Piece& q : held.pieces) {
      for (uint32_t s = 0; s < slots_; ++s) {
        const auto& plan = streamer_->plan(streamed_index, s);
        const auto first = plan.locate(m_.device_byte(q.begin), m_.lba_size());
        const auto last = plan.locate(m_.device_byte(q.end - 1), m_.lba_size());
        if (!first || !last) throw std::runtime_error("layer " + std::to_string(l.index) + "'s dense bytes are not in its streaming plan");
        if (*last - *first != q.end - 1 - q.begin || (s > 0 && *first != q.at))
          throw std::runtime_error("layer " + std::to_string(l.index) + "'s tensors are not laid out contiguously in a slot");
        q.at = *first;
      }
    }
    return held;
  }

  // A pass of more than kBatchTileTokens tokens reads each weight several times (gpu_matmul.h): from a
  // slot, that is several times across the GPU's link (a 512-token prompt of the 70B-shaped model once
  // took 78 s, not one 4.7 s pass). So the slot is copied to GPU memory first, once, on the compute
  // stream, and released: the next layer's reads may land in it while this one computes.
  const uint8_t* stage_streamed(const stream::SlotView& v) {
    if (!stage_) {
      void* p = nullptr;
      device::check_cuda(cudaMalloc(&p, streamer_->slot_bytes()), "cudaMalloc of the batched pass's layer copy");
      stage_.reset(static_cast<uint8_t*>(p));
    }
    device::check_cuda(cudaMemcpyAsync(stage_.get(), v.device, v.bytes, cudaMemcpyDefault, compute_),
                       "copy of a streamed layer to GPU memory");
    return stage_.get();
  }

  void begin_next() {
    const uint32_t n = n_streamed_;
    streamer_->begin(uint32_t(begun_ % n), uint32_t(begun_ % slots_), reinterpret_cast<stream::cuda_stream_t>(io_stream_));
    ++begun_;
  }

  static constexpr uint32_t kMaxAutoSlots = 64;  // --max-seqs auto's most (llm_seqs' and the server's range)
  // Layers the host enqueues ahead of the GPU (host_lead.h): a few hundred pending operations at most,
  // and a fetched layer's worth of work queued while the host wakes.
  static constexpr uint32_t kHostLeadLayers = 4;

  const ModelOnDevice& m_;
  ResidencyPlan plan_;        // by model layer (a GPU of several: other GPUs' layers hold nothing here)
  LayerRange range_;          // the layers this GPU runs (one GPU: all)
  PipelineStage pipe_;        // a GPU of several: its link (null: one GPU)
  std::optional<int> listed_gpu_;  // one GPU chosen by id (--gpus device=N): the CUDA device it runs on
  ResidencyPlan range_plan_;  // a GPU of several: the plan of its range alone
  uint32_t first_qid_ = 2;    // its NVMe queues from here
  uint64_t vram_budget_ = 0;
  cudaStream_t io_stream_ = nullptr, compute_ = nullptr;
  HostLead lead_{kHostLeadLayers};
  std::unique_ptr<DeviceCopy> embd_, norm_, out_;
  std::vector<std::unique_ptr<DeviceCopy>> vram_;  // [layer]: the VRAM tier's copies
  struct CudaFree {
    void operator()(uint8_t* p) const { cudaFree(p); }
  };
  std::unique_ptr<uint8_t, CudaFree> stage_;  // a streamed layer in GPU memory, for batched passes
  std::unique_ptr<RamTier> ram_;
  std::unique_ptr<LayerSource> nvme_source_;
  std::vector<host::Controller*> ctrls_;  // the NVMe tier's: one, or a striped set's members
  std::unique_ptr<stream::GpuQueues> queues_;
  std::unique_ptr<stream::GpuSubmitter> submitter_;
  struct StripeMember {
    std::unique_ptr<stream::GpuQueues> queues;
    std::unique_ptr<stream::GpuSubmitter> submitter;
    cudaStream_t io = nullptr;
    ~StripeMember() {
      submitter.reset();  // waits for its kernels
      if (io) cudaStreamDestroy(io);
    }
  };
  std::vector<std::unique_ptr<StripeMember>> members_;  // a striped set's, in member order
  std::unique_ptr<stream::LayerStreamer> streamer_;
  std::unique_ptr<FetchedExperts> experts_;
  std::unique_ptr<GpuForward> fwd_;
  std::vector<PackedRanges> slot_held_;  // [streamed index]: where its dense part lies in any slot
  std::vector<uint32_t> stream_index_;  // [layer]: its index among the streamed layers
  uint64_t streamer_bytes_per_step_ = 0;
  uint32_t slots_ = 2, n_streamed_ = 0;
  uint64_t begun_ = 0, consumed_ = 0;
  bool finished_ = false;
  std::unique_ptr<DecodeProfile> profile_;  // GPUNVME_DECODE_EVENTS=1 (decode_profile.h); null: off
  bool chain_on_ = false;       // chains(): greedy passes submitted ahead of their picks
  uint32_t chained_ = 0;        // submitted, not collected (0..2)
  uint32_t chain_slot_ = 0;     // the next submitted pass's pick slot
  bool chain_picked_ = false;   // a chained pass was submitted since the last other pass (its pick is on the device)
  CapturedWork graph_;  // one-token passes over resident layers (resident_graphed)
  bool graph_on_ = false, graph_warm_ = false;
  uint64_t graph_replays_ = 0;
  SeqSlots seqs_;  // each sequence slot's length in the KV cache
  KvCacheShape kv_;  // the cache's shape (its slots: kv_slots())
  // Declared last, destroyed first: its thread may still be reading bytes the tiers above own
  // (a constructor that threw part way).
  std::unique_ptr<LoadCheck> check_;
  std::unique_ptr<GpuLoadCheck> gpu_check_;
};

}  // namespace

void check_gpus_here(uint32_t count, std::span<const int> ids) {
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) visible = 0;
  check_gpus_present(count, ids, visible, std::getenv("CUDA_VISIBLE_DEVICES"));
}

std::unique_ptr<Executor> make_gpu_executor(std::span<host::Controller* const> controllers, const ModelOnDevice& m,
                                            uint32_t n_ctx, const GpuExecOptions& o) {
  // GPUs chosen by count past one, or by id: each must be there (the error names the missing ones).
  if (o.gpus > 1 || !o.gpu_ids.empty()) check_gpus_here(o.gpus, o.gpu_ids);
  if (o.gpus > 1) return make_multi_gpu_executor(controllers, m, n_ctx, o);  // an executor like this one per GPU
  if (o.stage && !o.stage->link && (o.stage->layers.begin != 0 || o.stage->layers.end != m.config.n_layer))
    throw std::logic_error("a GPU executor of a layer range needs a HiddenLink");
  std::string why;
  if (!gpu_available(&why)) throw std::runtime_error("no GPU for the GPU executor: " + why);
  // One GPU by id: current on the calling thread, which makes every call of the executor (as always).
  if (o.gpu_ids.size() == 1) {
    const std::string what = "cudaSetDevice(" + std::to_string(o.gpu_ids[0]) + ") for --gpus device=" + std::to_string(o.gpu_ids[0]);
    device::check_cuda(cudaSetDevice(o.gpu_ids[0]), what.c_str());
  }
  return std::make_unique<GpuExecutor>(controllers, m, n_ctx, o);
}

std::unique_ptr<Executor> make_gpu_executor(host::Controller& c, const ModelOnDevice& m, uint32_t n_ctx,
                                            const GpuExecOptions& o) {
  host::Controller* one = &c;
  return make_gpu_executor(std::span<host::Controller* const>(&one, 1), m, n_ctx, o);
}

}  // namespace gpunvme::llm
