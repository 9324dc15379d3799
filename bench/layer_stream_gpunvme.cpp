// The gpunvme modes of bench/layer_stream: stream::LayerStreamer (two slots in DMA memory, GPU mapped
// where a GPU is present) per drive, all drives in lockstep.
//   gpunvme-cpu  stream::CpuSubmitter with its pump thread (CPU-initiated NVMe commands, one queue
//                per drive); the host waits for each layer, then enqueues the copy and the kernel
//   gpunvme-gpu  stream::GpuSubmitter (CUDA builds): kernels on one highest-priority `io` stream per
//                drive issue the reads; the copy stream waits for them on the GPU; the host only
//                enqueues and never blocks until the end of the pass (LayerStreamer::sync)
#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "bench/layer_stream.h"
#include "bench/layer_stream_modes.h"
#include "host/open_device.h"
#include "runtime/stream/cpu_submitter.h"
#include "runtime/stream/layer_streamer.h"

#if GPUNVME_HAVE_CUDA && __has_include("runtime/stream/gpu_submitter.h")
#include <cuda_runtime.h>

#include "runtime/stream/gpu_submitter.h"
#define GPUNVME_LS_HAVE_GPU_SUBMITTER 1
#else
#define GPUNVME_LS_HAVE_GPU_SUBMITTER 0
#endif

namespace gpunvme::bench::ls {
namespace {

stream::StreamerOptions streamer_options(const GpunvmeContext& ctx) {
  stream::StreamerOptions o;
  o.slots = 2;
  o.align = ctx.layout->align;
  o.max_command_bytes = ctx.max_command_bytes;
  o.gpu_mapped = ctx.consumer->on_gpu();
  return o;
}

// The streamer packs a layer's extents exactly like the layout did; check it, so every mode's bytes
// land at the same layer-buffer offsets.
void check_plans(const GpunvmeContext& ctx, uint32_t d, const stream::LayerStreamer& s) {
  const Layout& L = *ctx.layout;
  for (uint32_t l = 0; l < L.layers(); ++l) {
    std::vector<const Span*> mine;
    for (const Span& sp : L.spans[l])
      if (sp.drive == d) mine.push_back(&sp);
    for (uint32_t slot = 0; slot < s.slot_count(); ++slot) {
      const plan::CommandPlan& p = s.plan(l, slot);
      bool ok = p.pieces.size() == mine.size();
      for (size_t i = 0; ok && i < mine.size(); ++i)
        ok = L.drive_base[d] + p.pieces[i].dest_offset == mine[i]->dest &&
             p.pieces[i].source.lba_count * L.lba_bytes == mine[i]->bytes;
      if (!ok)
        throw std::logic_error("layer_stream: the streamer packs layer " + std::to_string(l) + " of drive " +
                               std::to_string(d) + " differently from the benchmark's layout (bug)");
    }
  }
}

// The counters that grew from `before` to `now` (a submitter's counters only grow).
host::RecoveryStats recovery_since(const host::RecoveryStats& now, const host::RecoveryStats& before) {
  host::RecoveryStats d = now;
  d.retries -= before.retries;
  d.timeouts -= before.timeouts;
  d.aborts -= before.aborts;
  d.resets -= before.resets;
  d.resubmitted -= before.resubmitted;
  d.protocol_errors -= before.protocol_errors;
  d.failed -= before.failed;
  d.seconds_lost -= before.seconds_lost;
  return d;
}

// One layer's commands spread over several CPU submitters (one queue pair and pump thread each), in
// contiguous parts: what the CpuSubmitter, one queue by design, needs to use more than one
// emulator thread (queue q is served by emulator thread (q - 1) % threads).
class FanoutSubmitter final : public stream::Submitter {
 public:
  explicit FanoutSubmitter(std::vector<stream::Submitter*> subs) : subs_(std::move(subs)) {}
  uint64_t issue(std::span<const nvme::SubmissionEntry> commands) override {
    std::vector<uint64_t> t(subs_.size(), 0);
    const size_t n = commands.size(), k = subs_.size();
    for (size_t i = 0; i < k; ++i) {
      const size_t b = n * i / k, e = n * (i + 1) / k;
      if (e > b) t[i] = subs_[i]->issue(commands.subspan(b, e - b));
    }
    tickets_.emplace(next_, std::move(t));
    return next_++;
  }
  void progress() override {
    for (auto* s : subs_) s->progress();
  }
  bool done(uint64_t ticket) override {
    const auto& t = tickets_.at(ticket);
    for (size_t i = 0; i < t.size(); ++i)
      if (t[i] && !subs_[i]->done(t[i])) return false;
    return true;
  }
  void wait(uint64_t ticket) override {
    auto it = tickets_.find(ticket);
    if (it == tickets_.end()) throw std::logic_error("layer_stream fan-out: unknown ticket");
    const std::vector<uint64_t> t = std::move(it->second);
    tickets_.erase(it);
    std::exception_ptr first;
    for (size_t i = 0; i < t.size(); ++i) {
      if (!t[i]) continue;
      try {
        subs_[i]->wait(t[i]);  // every part is waited for, so no command outlives the call
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }
  host::RecoveryStats recovery() const override {
    host::RecoveryStats r;
    for (auto* s : subs_) r += s->recovery();
    return r;
  }

 private:
  std::vector<stream::Submitter*> subs_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> tickets_;
  uint64_t next_ = 1;
};

void add_parts(const GpunvmeContext& ctx, uint32_t d, const stream::SlotView& v, std::vector<HostPart>& parts) {
  for (const plan::Piece& pc : v.plan->pieces)
    parts.push_back(HostPart{v.host + pc.dest_offset, pc.source.lba_count * ctx.layout->lba_bytes,
                             ctx.layout->drive_base[d] + pc.dest_offset});
}

// Opens drive d's controller into dr.ctrl and up to `wanted` I/O queue pairs into dr.qps (as many as it
// grants, at least one; rings in `memory`, or the controller's default memory when null), so that the
// mode's Drive deletes them however the constructor ends. Returns how many.
template <class Drive>
uint32_t open_queues(Drive& dr, const GpunvmeContext& ctx, uint32_t d, uint32_t wanted, const host::DmaOptions* memory,
                     const char* mode) {
  host::ControllerOptions co;
  co.io_queues_wanted = wanted;
  dr.ctrl = host::open_controller(ctx.devices[d], co);
  const uint32_t nq = std::min(wanted, dr.ctrl->io_queues_granted());
  if (nq == 0) throw std::runtime_error(std::string(mode) + ": the controller granted no I/O queues");
  const uint32_t entries = std::min<uint32_t>(ctx.queue_entries, dr.ctrl->max_queue_entries());
  for (uint32_t q = 0; q < nq; ++q)
    dr.qps.push_back(memory ? dr.ctrl->create_io_queue_pair(uint16_t(q + 1), entries, *memory)
                            : dr.ctrl->create_io_queue_pair(uint16_t(q + 1), entries));
  return nq;
}

class CpuMode final : public Mode {
 public:
  explicit CpuMode(const GpunvmeContext& ctx) : ctx_(ctx) {
    for (uint32_t d = 0; d < ctx.devices.size(); ++d) {
      auto dr = std::make_unique<Drive>();
      const uint32_t nq = open_queues(*dr, ctx, d, ctx.cpu_queues, nullptr, "gpunvme-cpu");
      stream::CpuSubmitterOptions so;
      so.pump_thread = true;
      std::vector<stream::Submitter*> subs;
      for (uint32_t q = 0; q < nq; ++q) {
        dr->subs.push_back(std::make_unique<stream::CpuSubmitter>(*dr->ctrl, *dr->qps[q], so));
        subs.push_back(dr->subs.back().get());
      }
      dr->fan = std::make_unique<FanoutSubmitter>(subs);
      stream::Submitter& sub = nq == 1 ? *subs[0] : static_cast<stream::Submitter&>(*dr->fan);
      dr->s = std::make_unique<stream::LayerStreamer>(*dr->ctrl, sub, ctx.layout->extents[d], streamer_options(ctx));
      queues_ = nq;
      check_plans(ctx, d, *dr->s);
      drives_.push_back(std::move(dr));
    }
  }

  ~CpuMode() override { ctx_.consumer->quiesce(); }  // no copy may still read a slot

  PassResult stream(uint32_t n, uint64_t compute_ns) override {
    Consumer& c = *ctx_.consumer;
    for (auto& d : drives_) d->s->reset_stats();
    c.begin_pass(n, compute_ns);
    const auto t0 = Clock::now();
    Clock::time_point landed = t0;
    for (auto& d : drives_) d->s->begin(0, 0);
    std::vector<HostPart> parts;
    for (uint32_t l = 0; l < n; ++l) {
      if (l + 1 < n)
        for (auto& d : drives_) d->s->begin(l + 1, (l + 1) % 2);
      parts.clear();
      for (uint32_t d = 0; d < drives_.size(); ++d) add_parts(ctx_, d, drives_[d]->s->wait(l % 2), parts);
      if (l + 1 == n) landed = Clock::now();
      c.consume_host(l, parts, /*wait_copy=*/true);
      for (auto& d : drives_) d->s->release(l % 2);
    }
    PassResult r;
    r.consumer = c.end_pass();
    r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    r.landed_s = std::chrono::duration<double>(landed - t0).count();
    for (auto& d : drives_) {
      const host::RecoveryStats now = d->s->recovery();
      r.recovery += recovery_since(now, d->seen);  // this pass's share
      d->seen = now;
    }
    return r;
  }

 private:
  struct Drive {
    std::unique_ptr<host::Controller> ctrl;
    std::vector<std::unique_ptr<host::QueuePair>> qps;
    std::vector<std::unique_ptr<stream::CpuSubmitter>> subs;
    std::unique_ptr<FanoutSubmitter> fan;
    std::unique_ptr<stream::LayerStreamer> s;
    host::RecoveryStats seen;  // the submitters' counters before this pass
    ~Drive() {
      s.reset();  // drains its reads first
      fan.reset();
      subs.clear();
      for (auto& q : qps) try {
          ctrl->delete_io_queue_pair(*q);
        } catch (...) {
        }
    }
  };
  std::string note() const override {
    return std::to_string(queues_) + " CPU queue(s) + pump thread(s) per drive";
  }
  GpunvmeContext ctx_;
  uint32_t queues_ = 0;
  std::vector<std::unique_ptr<Drive>> drives_;
};

#if GPUNVME_LS_HAVE_GPU_SUBMITTER
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string("gpunvme-gpu: ") + what + ": " + cudaGetErrorString(e));
  }
}

class GpuMode final : public Mode {
 public:
  explicit GpuMode(const GpunvmeContext& ctx) : ctx_(ctx) {
    if (!ctx.consumer->on_gpu()) throw Unavailable("no CUDA GPU in this process (the GPU submitter needs one)");
    int least = 0, greatest = 0;
    cuda_check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    for (uint32_t d = 0; d < ctx.devices.size(); ++d) {
      auto dr = std::make_unique<Drive>();
      host::DmaOptions mem;
      mem.gpu_mapped = true;
      const uint32_t nq = open_queues(*dr, ctx, d, ctx.gpu_queues, &mem, "gpunvme-gpu");
      std::vector<host::QueuePair*> raw;
      for (auto& qp : dr->qps) raw.push_back(qp.get());
      // Each command id's PRP-list area must cover the largest command the plans hold.
      const uint64_t mdts = dr->ctrl->max_transfer_bytes();
      stream::GpuSubmitterOptions go;
      go.max_command_bytes = ctx.max_command_bytes ? (mdts ? std::min(ctx.max_command_bytes, mdts) : ctx.max_command_bytes)
                                                   : (mdts ? mdts : (1ull << 20));
      dr->sub = std::make_unique<stream::GpuSubmitter>(*dr->ctrl, raw, 1, go);
      stream::StreamerOptions so = streamer_options(ctx);
      so.max_command_bytes = go.max_command_bytes;
      dr->s = std::make_unique<stream::LayerStreamer>(*dr->ctrl, *dr->sub, ctx.layout->extents[d], so);
      check_plans(ctx, d, *dr->s);
      // One io stream per drive: a submitter's kernels run one after another on their stream, and
      // the drives must read at the same time. Highest priority, so the reads are not queued behind
      // compute blocks.
      cuda_check(cudaStreamCreateWithPriority(&dr->io, cudaStreamNonBlocking, greatest), "cudaStreamCreateWithPriority(io)");
      queues_ = nq;
      drives_.push_back(std::move(dr));
    }
    cuda_check(cudaEventCreate(&ev_start_), "cudaEventCreate");
    cuda_check(cudaEventCreate(&ev_landed_), "cudaEventCreate");
  }
  ~GpuMode() override {
    ctx_.consumer->quiesce();  // no copy may still read a slot
    for (auto& d : drives_)
      if (d->io) cudaStreamSynchronize(d->io);
    cudaGetLastError();
    drives_.clear();
    if (ev_start_) cudaEventDestroy(ev_start_);
    if (ev_landed_) cudaEventDestroy(ev_landed_);
  }

  std::string note() const override { return std::to_string(queues_) + " GPU-driven queue(s) per drive"; }

  PassResult stream(uint32_t n, uint64_t compute_ns) override {
    Consumer& c = *ctx_.consumer;
    for (auto& d : drives_) d->s->reset_stats();
    c.begin_pass(n, compute_ns);
    auto* copy = static_cast<stream::cuda_stream_t>(c.copy_stream());
    const auto t0 = Clock::now();
    // GPU-side read-stage timing: from before the first read kernel to the point where the copy
    // stream has waited for the last layer's reads.
    cuda_check(cudaEventRecord(ev_start_, drives_[0]->io), "cudaEventRecord(start)");
    for (auto& d : drives_) d->s->begin(0, 0, io(*d));
    std::vector<HostPart> parts;
    for (uint32_t l = 0; l < n; ++l) {
      if (l + 1 < n)
        for (auto& d : drives_) d->s->begin(l + 1, (l + 1) % 2, io(*d));
      parts.clear();
      for (uint32_t d = 0; d < drives_.size(); ++d) add_parts(ctx_, d, drives_[d]->s->wait(l % 2, copy), parts);
      if (l + 1 == n) cuda_check(cudaEventRecord(ev_landed_, static_cast<cudaStream_t>(c.copy_stream())), "cudaEventRecord(landed)");
      c.consume_host(l, parts, /*wait_copy=*/false);  // copy + kernel enqueued behind the reads
      for (auto& d : drives_) d->s->release(l % 2, copy);
    }
    for (auto& d : drives_) d->s->sync();  // throws the first failed read
    PassResult r;
    for (auto& d : drives_) {
      const host::RecoveryStats now = d->s->recovery();
      r.recovery += recovery_since(now, d->seen);  // this pass's share
      d->seen = now;
    }
    r.consumer = c.end_pass();
    r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    float ms = 0;
    if (n > 0 && cudaEventElapsedTime(&ms, ev_start_, ev_landed_) == cudaSuccess) r.landed_s = ms / 1e3;
    cudaGetLastError();
    return r;
  }

 private:
  struct Drive {
    std::unique_ptr<host::Controller> ctrl;
    std::vector<std::unique_ptr<host::QueuePair>> qps;
    std::unique_ptr<stream::GpuSubmitter> sub;
    std::unique_ptr<stream::LayerStreamer> s;
    cudaStream_t io = nullptr;
    host::RecoveryStats seen;  // the submitter's counters before this pass
    ~Drive() {
      s.reset();
      sub.reset();
      if (io) cudaStreamDestroy(io);
      for (auto& q : qps) try {
          ctrl->delete_io_queue_pair(*q);
        } catch (...) {
        }
    }
  };
  static stream::cuda_stream_t io(Drive& d) { return reinterpret_cast<stream::cuda_stream_t>(d.io); }
  GpunvmeContext ctx_;
  uint32_t queues_ = 0;
  cudaEvent_t ev_start_ = nullptr, ev_landed_ = nullptr;
  std::vector<std::unique_ptr<Drive>> drives_;
};
#endif

}  // namespace

std::unique_ptr<Mode> make_gpunvme_cpu_mode(const GpunvmeContext& ctx) { return std::make_unique<CpuMode>(ctx); }

std::unique_ptr<Mode> make_gpunvme_gpu_mode(const GpunvmeContext& ctx) {
#if GPUNVME_LS_HAVE_GPU_SUBMITTER
  return std::make_unique<GpuMode>(ctx);
#elif GPUNVME_HAVE_CUDA
  (void)ctx;
  throw Unavailable("this tree has no runtime/stream/gpu_submitter.h (GPU submitter not written yet)");
#else
  (void)ctx;
  throw Unavailable("this build has no CUDA (configure with -Dcuda=enabled on a machine with nvcc)");
#endif
}

}  // namespace gpunvme::bench::ls
