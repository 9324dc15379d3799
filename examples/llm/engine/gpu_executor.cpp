// The GPU executor: the engine as an outside engine would use gpunvme's runtime.
//   - token embeddings, output norm and head: read once at start into GPU memory;
//   - the first `resident_layers` layers: read once into one GPU buffer;
//   - every other layer: a LayerStreamer over GPU-driven NVMe queues (GpuSubmitter) reads it into a
//     slot on the `io` stream while the previous layer computes on the `compute` stream; the compute
//     stream waits on the GPU for exactly its layer, the slot is refilled only after the layer's
//     kernels ran (release on `compute`). Loads run ahead across token boundaries: the layer order
//     does not depend on the token.
//   - MoE models: the streamer reads only a streamed layer's dense part (attention, norms, router); the
//     router's top-k ids stay in GPU memory and the GPU expert fetcher reads just those experts (with an
//     optional LRU cache in GPU-mapped memory) before the expert kernels run, all on the compute stream.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "examples/gpu_toys.h"
#include "examples/llm/compute/gpu_forward.h"
#include "device/cuda_check.h"
#include "examples/llm/engine/executor.h"
#include "runtime/plan/command_plan.h"
#include "runtime/stream/gpu_expert_fetcher.h"
#include "runtime/stream/gpu_submitter.h"
#include "runtime/stream/layer_streamer.h"

namespace gpunvme::llm {
namespace {

// GPU memory holding model bytes [begin, end), read through the CPU queue in 64 MiB pieces.
struct DeviceCopy {
  uint8_t* p = nullptr;
  uint64_t begin = 0, bytes = 0;
  DeviceCopy(const ModelOnDevice& m, uint64_t b, uint64_t e) : begin(b), bytes(e - b) {
    device::check_cuda(cudaMalloc(reinterpret_cast<void**>(&p), bytes ? bytes : 1), "cudaMalloc for resident weights");
    std::vector<uint8_t> stage(std::min<uint64_t>(bytes, 64u << 20));
    for (uint64_t off = 0; off < bytes; off += stage.size()) {
      const uint64_t n = std::min<uint64_t>(stage.size(), bytes - off);
      read_model_bytes(m, begin + off, n, stage.data());
      device::check_cuda(cudaMemcpy(p + off, stage.data(), n, cudaMemcpyHostToDevice), "copy of resident weights");
    }
  }
  ~DeviceCopy() { cudaFree(p); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  const uint8_t* at(const TensorRef& t) const { return p + (t.file_offset - begin); }
  WeightView view() const { return {p, -int64_t(begin)}; }
};

// MoE experts of streamed layers: the GPU expert fetcher reads the routed experts after the router ran,
// on the compute stream, on queues of its own (the streamer's kernels drive theirs on the I/O stream).
class FetchedExperts final : public ExpertSource {
 public:
  FetchedExperts(host::Controller& c, const ModelOnDevice& m, uint32_t first_qid, uint32_t queues, uint64_t cache_bytes)
      : queues_(c, uint16_t(first_qid), queues, 256),
        submitter_(c, queues_.raw, 1),
        fetcher_(c, submitter_, stream::ExpertCatalog::from_map(*m.map),
                 stream::FetcherOptions{.max_experts_per_fetch = m.config.n_expert_used, .cache_bytes = cache_bytes}) {}
  void fetch(uint32_t layer, const uint32_t* ids, uint32_t k, gpu_stream_t s) override {
    fetcher_.fetch(layer, ids, k, reinterpret_cast<stream::cuda_stream_t>(s));
  }
  const uint8_t* scratch() const override { return static_cast<const uint8_t*>(fetcher_.scratchpad().device()); }
  const stream::GpuFetchedExpert* experts() const override { return fetcher_.device_experts(); }
  const uint32_t* selection() const override { return fetcher_.device_selection(); }
  stream::FetcherMetrics metrics() const { return fetcher_.metrics(); }
  void wait() { fetcher_.wait(); }

 private:
  example::GpuQueues queues_;
  stream::GpuSubmitter submitter_;
  stream::GpuExpertFetcher fetcher_;
};

class GpuExecutor final : public Executor {
 public:
  GpuExecutor(host::Controller& c, const ModelOnDevice& m, uint32_t n_ctx, const GpuExecOptions& o)
      : m_(m), resident_(std::min(o.resident_layers, m.config.n_layer)) {
    open_streams();
    load_globals();
    if (resident_ > 0)
      layers_copy_ = std::make_unique<DeviceCopy>(m, m.weights.layers[0].begin, m.weights.layers[resident_ - 1].end);
    if (resident_ < m.config.n_layer) open_streamer(c, o);
    fwd_ = std::make_unique<GpuForward>(m.config, m.weights, n_ctx,
                                        GlobalWeights{embd_->at(m.weights.token_embd), norm_->at(m.weights.output_norm),
                                                      out_ ? out_->at(m.weights.output) : embd_->at(m.weights.output)},
                                        reinterpret_cast<gpu_stream_t>(compute_));
  }
  ~GpuExecutor() override {
    try {
      finish();
    } catch (...) {
    }
    fwd_.reset();
    experts_.reset();
    streamer_.reset();
    submitter_.reset();
    if (io_stream_) cudaStreamDestroy(io_stream_);
    if (compute_) cudaStreamDestroy(compute_);
  }

  const std::vector<float>& step(uint32_t token, uint32_t pos) override {
    fwd_->embed(token, pos);
    for (const LayerWeights& l : m_.weights.layers) {
      if (l.index < resident_) {
        fwd_->layer(l, layers_copy_->view());
        continue;
      }
      const uint32_t slot = uint32_t(consumed_ % slots_);
      const stream::SlotView v = streamer_->wait(slot, reinterpret_cast<stream::cuda_stream_t>(compute_));
      fwd_->layer(l, {static_cast<const uint8_t*>(v.device), slot_delta_[l.index - resident_]}, experts_.get());
      streamer_->release(slot, reinterpret_cast<stream::cuda_stream_t>(compute_));
      ++consumed_;
      begin_next();
    }
    return fwd_->logits();
  }

  void finish() override {
    if (!streamer_ || finished_) return;
    finished_ = true;
    auto comp = reinterpret_cast<stream::cuda_stream_t>(compute_);
    while (consumed_ < begun_) {  // loads that ran ahead of the last token: drain them
      const uint32_t slot = uint32_t(consumed_++ % slots_);
      streamer_->wait(slot, comp);
      streamer_->release(slot, comp);
    }
    streamer_->sync();
    if (experts_) experts_->wait();  // throws the first failed expert read
    device::check_cuda(cudaStreamSynchronize(compute_), "compute stream");
  }

  ExecStats stats() const override {
    ExecStats s;
    s.resident_layers = resident_;
    s.streamed_layers = m_.config.n_layer - resident_;
    for (uint32_t i = resident_; i < m_.config.n_layer; ++i) s.bytes_per_step += m_.weights.layers[i].end - m_.weights.layers[i].begin;
    s.resident_bytes = (layers_copy_ ? layers_copy_->bytes : 0) + embd_->bytes + (out_ ? out_->bytes : 0);
    if (streamer_) {
      const auto& st = streamer_->stats();
      s.streamed_bytes = st.bytes;
      s.io_seconds = st.io_seconds;
      s.stall_seconds = st.wait_seconds;
    }
    return s;
  }

  std::string describe() const override {
    char b[256];
    std::snprintf(b, sizeof b,
                  "GPU executor: %u layers resident in GPU memory, %u streamed per token through %u slots by GPU-issued "
                  "NVMe reads (%zu queues); KV cache and activations %.1f MB",
                  resident_, m_.config.n_layer - resident_, streamer_ ? slots_ : 0, queues_ ? queues_->raw.size() : size_t(0),
                  fwd_->device_bytes() / 1e6);
    return b;
  }

 private:
  void open_streams() {
    int lo = 0, hi = 0;
    device::check_cuda(cudaDeviceGetStreamPriorityRange(&lo, &hi), "stream priorities");
    device::check_cuda(cudaStreamCreateWithPriority(&io_stream_, cudaStreamNonBlocking, hi), "I/O stream");
    device::check_cuda(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "compute stream");
  }

  void load_globals() {
    const ModelWeights& w = m_.weights;
    embd_ = std::make_unique<DeviceCopy>(m_, w.token_embd.file_offset, w.token_embd.file_offset + w.token_embd.bytes);
    norm_ = std::make_unique<DeviceCopy>(m_, w.output_norm.file_offset, w.output_norm.file_offset + w.output_norm.bytes);
    if (w.output.file_offset != w.token_embd.file_offset)
      out_ = std::make_unique<DeviceCopy>(m_, w.output.file_offset, w.output.file_offset + w.output.bytes);
  }

  // The streamed layers' plans, and where each layer's tensors sit in a slot.
  void open_streamer(host::Controller& c, const GpuExecOptions& o) {
    // MoE: the streamer reads the dense part of a layer; the routed experts come from the fetcher.
    auto all = plan::layer_extents(*m_.map, /*skip_experts=*/m_.config.is_moe());
    if (m_.config.is_moe()) experts_ = std::make_unique<FetchedExperts>(c, m_, 2 + o.queues, o.queues, o.expert_cache_bytes);
    std::vector<std::vector<model::Extent>> streamed(all.begin() + resident_, all.begin() + m_.config.n_layer);
    queues_ = std::make_unique<example::GpuQueues>(c, 2, o.queues, 256);
    submitter_ = std::make_unique<stream::GpuSubmitter>(c, queues_->raw, 1);
    slots_ = std::max<uint32_t>(1, o.slots);
    streamer_ = std::make_unique<stream::LayerStreamer>(c, *submitter_, std::move(streamed), stream::StreamerOptions{.slots = slots_});
    for (uint32_t i = resident_; i < m_.config.n_layer; ++i) slot_delta_.push_back(locate_layer(m_.weights.layers[i], i - resident_));
    for (uint32_t k = 0; k < slots_; ++k) begin_next();
  }

  // slot offset - file offset for every tensor of the layer (the same in every slot, checked).
  int64_t locate_layer(const LayerWeights& l, uint32_t streamed_index) const {
    int64_t delta = 0;
    bool first = true;
    for (const model::TensorExtent& te : m_.map->tensors()) {
      const uint64_t off = te.tensor->file_offset;
      if (off < l.begin || off >= l.end) continue;
      if (m_.config.is_moe() && te.tensor->name.find("_exps.") != std::string::npos) continue;  // fetched, not streamed
      for (uint32_t s = 0; s < slots_; ++s) {
        const auto at = streamer_->plan(streamed_index, s).locate(m_.device_byte(off), m_.lba_size());
        if (!at) throw std::runtime_error("tensor " + te.tensor->name + " is not in its layer's streaming plan");
        const int64_t d = int64_t(*at) - int64_t(off);
        if (!first && d != delta) throw std::runtime_error("layer " + std::to_string(l.index) + "'s tensors are not laid out contiguously in a slot");
        delta = d;
        first = false;
      }
    }
    return delta;
  }

  void begin_next() {
    const uint32_t n = m_.config.n_layer - resident_;
    streamer_->begin(uint32_t(begun_ % n), uint32_t(begun_ % slots_), reinterpret_cast<stream::cuda_stream_t>(io_stream_));
    ++begun_;
  }

  const ModelOnDevice& m_;
  uint32_t resident_;
  cudaStream_t io_stream_ = nullptr, compute_ = nullptr;
  std::unique_ptr<DeviceCopy> embd_, norm_, out_, layers_copy_;
  std::unique_ptr<example::GpuQueues> queues_;
  std::unique_ptr<stream::GpuSubmitter> submitter_;
  std::unique_ptr<stream::LayerStreamer> streamer_;
  std::unique_ptr<FetchedExperts> experts_;
  std::unique_ptr<GpuForward> fwd_;
  std::vector<int64_t> slot_delta_;
  uint32_t slots_ = 2;
  uint64_t begun_ = 0, consumed_ = 0;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<Executor> make_gpu_executor(host::Controller& c, const ModelOnDevice& m, uint32_t n_ctx,
                                            const GpuExecOptions& o) {
  std::string why;
  if (!gpu_available(&why)) throw std::runtime_error("no GPU for the GPU executor: " + why);
  return std::make_unique<GpuExecutor>(c, m, n_ctx, o);
}

}  // namespace gpunvme::llm
