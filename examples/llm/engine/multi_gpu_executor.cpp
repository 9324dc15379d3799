#include "examples/llm/engine/multi_gpu_executor.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "examples/llm/compute/kv_cache_shape.h"
#include "examples/llm/engine/gpu_ids.h"
#include "examples/llm/engine/gpu_worker.h"
#include "examples/llm/engine/host_memory.h"
#include "examples/llm/engine/layer_split.h"
#include "examples/llm/engine/model_on_device.h"
#include "examples/llm/engine/nccl_comm.h"
#include "examples/llm/engine/stream_slots.h"
#include "examples/llm/engine/vram_reserve.h"
#include "host/text/human_bytes.h"
#include "host/text/escape.h"

namespace gpunvme::llm {
namespace {

using Clock = std::chrono::steady_clock;
// The longest a pass (every GPU's share of it) or a GPU's start may take before the communicators are
// aborted: far above a prompt pass of a 70B-shaped model streamed at pcie4 (a few seconds per pass),
// and a hang still ends.
constexpr auto kPassTimeout = std::chrono::seconds(300);
// A GPU's start (its share read and checked through the CPU queue): a 70B-shaped model's 22 GiB read
// from a generated namespace takes minutes, not hours.
constexpr auto kStartTimeout = std::chrono::seconds(3600);
// After an abort, how long the other GPUs get to return.
constexpr auto kAbortTimeout = std::chrono::seconds(30);
// NVMe queues per GPU on a shared controller: the streamer's, the expert fetcher's and pre-gating's.
constexpr uint32_t kQueueSetsPerGpu = 3;

// The hand-off between GPU g and g + 1: how many sends GPU g has enqueued. GPU g + 1 enqueues a pass's
// recv only after the matching send: a recv kernel enqueued first would spin on its GPU while the
// sending GPU's thread still launches the pass's kernels, and a launch that loads a kernel's module
// (CUDA's lazy loading, the default) may wait for the GPUs' work to drain: the recv waits for the send,
// the send's launch for the recv, both threads wedged (NCCL's documented hazard of CUDA calls beside
// its kernels; the likely cause of a first 2-GPU pass that hung once on 2 H200s). Enqueued after its
// send, a recv's kernel waits only for work already queued. NcclComms connects the
// pairs at start, so a send returns once enqueued (the first send/recv of a pair waits for its peer).
class Handoff {
 public:
  void sent() {
    {
      std::lock_guard l(mu_);
      ++sent_;
    }
    cv_.notify_all();
  }
  // Waits until `count` sends were enqueued; false at the deadline. Wakes every few ms to let `stop` (an
  // abort) end the wait.
  bool wait(uint64_t count, Clock::time_point deadline, const std::function<void()>& stop) {
    std::unique_lock l(mu_);
    while (sent_ < count) {
      if (Clock::now() > deadline) return false;
      l.unlock();
      stop();
      l.lock();
      cv_.wait_for(l, std::chrono::milliseconds(5), [&] { return sent_ >= count; });
    }
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t sent_ = 0;
};

// GPU `rank`'s ends of the hidden state's way (pipeline_stage.h), over the process's communicators;
// `id`, `prev_id` and `next_id` the CUDA devices of it and of its neighbours (the messages name them);
// `in` the hand-off from the previous GPU (none on the first), `out` to the next (none on the last).
class NcclLink final : public HiddenLink {
 public:
  NcclLink(NcclComms& comms, int rank, int id, int prev_id, int next_id, Handoff* in, Handoff* out)
      : comms_(comms), rank_(rank), id_(id), prev_id_(prev_id), next_id_(next_id), in_(in), out_(out) {}
  void receive(float* x, size_t n, gpu_stream_t s) override {
    if (!in_->wait(received_ + 1, Clock::now() + kPassTimeout, [&] { comms_.check(rank_); }))
      throw std::runtime_error("GPU " + std::to_string(id_) + ": GPU " + std::to_string(prev_id_) + " did not send its hidden state within " +
                               std::to_string(kPassTimeout.count()) + " s");
    comms_.recv(rank_, x, n, rank_ - 1, cuda(s));
    ++received_;
  }
  void send(const float* x, size_t n, gpu_stream_t s) override {
    comms_.send(rank_, x, n, rank_ + 1, cuda(s));
    out_->sent();
  }
  // Polls the stream and the communicator's error until the send ended, at most kPassTimeout.
  void wait_sent(gpu_stream_t s) override {
    const auto deadline = Clock::now() + kPassTimeout;
    for (;;) {
      const cudaError_t e = cudaStreamQuery(cuda(s));
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady)
        throw std::runtime_error("GPU " + std::to_string(id_) + ": its pass failed: " + cudaGetErrorString(e));
      comms_.check(rank_);
      if (Clock::now() > deadline)
        throw std::runtime_error("GPU " + std::to_string(id_) + ": its hidden state did not reach GPU " + std::to_string(next_id_) +
                                 " within " + std::to_string(kPassTimeout.count()) + " s");
      // Off the critical path (the next GPU goes on as soon as its recv has the bytes): a coarse poll
      // keeps this thread off the host CPU while its GPU computes.
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

 private:
  static cudaStream_t cuda(gpu_stream_t s) { return reinterpret_cast<cudaStream_t>(s); }
  NcclComms& comms_;
  int rank_, id_, prev_id_, next_id_;
  Handoff *in_, *out_;
  uint64_t received_ = 0;  // passes whose recv this GPU enqueued
};

// The test hook of a GPU failing mid-run (tests/gpu/test_llm_multi_gpu_passes.cpp, engine_errors.py):
// GPUNVME_TEST_GPU_FAIL=ID:PASS makes CUDA device ID's share of pass PASS (counted from 0, every pass
// of the executor) throw on its thread before it enqueues anything, as a GPU lost at that point would
// fail: its neighbours are left waiting on NCCL for it, which the bounded wait must end. Read once.
constexpr const char* kFaultVariable = "GPUNVME_TEST_GPU_FAIL";
struct InjectedFault {
  int gpu = 0;
  uint64_t pass = 0;
  std::string text;
};
std::optional<InjectedFault> injected_fault() {
  const char* v = std::getenv(kFaultVariable);
  if (!v || !*v) return std::nullopt;
  InjectedFault f{.text = v};
  char tail = 0;
  unsigned long long pass = 0;
  if (std::sscanf(v, "%d:%llu%c", &f.gpu, &pass, &tail) != 2 || f.gpu < 0)
    throw std::invalid_argument(std::string(kFaultVariable) + "='" + text::printable(v) + "': give ID:PASS, e.g. 1:3");
  f.pass = pass;
  return f;
}

// Each GPU's VRAM budget (none: each its free memory, or --resident N).
std::vector<std::optional<uint64_t>> gpu_budgets(const GpuExecOptions& o) {
  std::vector<std::optional<uint64_t>> b(o.gpus);
  if (o.resident_layers) return b;
  if (!o.vram_budgets.empty() || o.vram_budget) {
    const std::vector<uint64_t> v = budgets_per_gpu(o.vram_budgets.empty() ? std::vector<uint64_t>{*o.vram_budget} : o.vram_budgets, o.gpus);
    b.assign(v.begin(), v.end());
  }
  return b;
}

// What the split is made from (split_gpus decides): the budgets, or each GPU's free memory (`free`)
// less what its executor keeps back and the global weights it will hold; the KV cache of a layer.
SplitInputs split_inputs(const ModelOnDevice& m, uint32_t n_ctx, const GpuExecOptions& o, std::vector<int> devices,
                         const std::vector<std::optional<uint64_t>>& budgets, std::vector<uint64_t> free) {
  const ModelWeights& w = m.weights;
  SplitInputs in{.devices = std::move(devices), .by_count = o.resident_layers.has_value()};
  for (const std::optional<uint64_t>& v : budgets)
    if (v) in.vram.push_back(*v);
  in.free = std::move(free);
  in.kept_back = vram_kept_back(layer_bytes(m), o.slots, o.max_batch);
  in.first_globals = w.token_embd.bytes;
  in.last_globals = w.output_norm.bytes + (w.tied() ? w.token_embd.bytes : w.output.bytes);
  in.ram = o.ram_budget;
  in.kv_per_layer = o.kv_in_host ? 0 : std::max(1u, o.max_seqs) * kv_slot_bytes(m.config, 1, n_ctx);
  return in;
}

class MultiGpuExecutor final : public Executor {
 public:
  MultiGpuExecutor(std::span<host::Controller* const> ctrls, const ModelOnDevice& m, uint32_t n_ctx, const GpuExecOptions& o)
      : ids_(gpu_devices(o.gpus, o.gpu_ids)), n_ctx_(n_ctx), n_vocab_(m.config.n_vocab) {
    if (!o.gpu_controllers.empty() && o.gpu_controllers.size() != o.gpus)
      throw std::invalid_argument(gpus_option(o.gpus, o.gpu_ids) + " with " + std::to_string(o.gpu_controllers.size()) +
                                  " namespaces: give one per GPU, or one for all");
    for (uint32_t g = 0; g < o.gpus; ++g) workers_.push_back(std::make_unique<GpuWorker>(ids_[g]));
    const std::vector<std::optional<uint64_t>> budgets = gpu_budgets(o);
    // Each GPU's free memory now, its context made, before any starts: what the split sizes its range by
    // where no budget is given (the same reading its executor makes for its own plan once started).
    std::vector<uint64_t> free(o.gpus);
    const bool by_free = !o.resident_layers && !budgets.front();
    if (by_free)
      on_all([&](uint32_t g) {
        size_t f = 0, total = 0;
        if (const cudaError_t e = cudaMemGetInfo(&f, &total); e != cudaSuccess)
          throw std::runtime_error(std::string("cudaMemGetInfo: ") + cudaGetErrorString(e));
        free[g] = f;
      }, "free memory");
    const GpuSplit split = split_gpus(layer_bytes(m), split_inputs(m, n_ctx, o, ids_, budgets, free));
    ranges_ = split.ranges;
    split_ = "layers split by " + split.rule;
    if (by_free) {
      split_ += " (";
      for (uint32_t g = 0; g < o.gpus; ++g) split_ += (g ? ", GPU " : "GPU ") + std::to_string(ids_[g]) + ": " + text::human_bytes(double(free[g]));
      split_ += ")";
    }
    comms_ = std::make_unique<NcclComms>(ids_);
    for (uint32_t g = 0; g + 1 < o.gpus; ++g) handoffs_.push_back(std::make_unique<Handoff>());
    for (uint32_t g = 0; g < o.gpus; ++g)
      links_.push_back(std::make_unique<NcclLink>(*comms_, int(g), ids_[g], g > 0 ? ids_[g - 1] : -1, g + 1 < o.gpus ? ids_[g + 1] : -1,
                                                  g > 0 ? handoffs_[g - 1].get() : nullptr, g + 1 < o.gpus ? handoffs_[g].get() : nullptr));
    stages_.resize(o.gpus);
    // What each GPU's streaming slots may pin (stream_slots.h), read once before any GPU starts.
    const uint64_t slot_host = slot_host_share(available_memory(), o.ram_budget, o.gpus);
    // One GPU at a time: each reads its share through the shared controller's CPU queue and makes its
    // NVMe queues on it (admin commands), which are not made for concurrent callers.
    try {
      for (uint32_t g = 0; g < o.gpus; ++g) {
        GpuExecOptions so = o;
        so.gpus = 1;
        so.vram_budget = budgets[g];
        so.vram_budgets.clear();
        so.ram_budget = o.ram_budget / o.gpus;
        so.gpu_controllers.clear();
        so.gpu_ids.clear();  // its thread has its device current
        // Its own namespace: its queues from 2; a shared one: each GPU's after the previous GPUs'.
        const bool own = !o.gpu_controllers.empty();
        const std::span<host::Controller* const> c = own ? std::span<host::Controller* const>(o.gpu_controllers[g]) : ctrls;
        so.stage = PipelineStage{ranges_[g], 2 + (own ? 0 : g * kQueueSetsPerGpu * o.queues), links_[g].get(), slot_host};
        devices_.push_back(c.empty() ? std::string() : c[0]->transport().name());
        on_each({g}, [&](uint32_t) { stages_[g] = make_gpu_executor(c, m, n_ctx, so); }, "start", kStartTimeout);
      }
    } catch (...) {
      release_stages();
      throw;
    }
  }

  ~MultiGpuExecutor() override {
    try {
      finish();
    } catch (...) {
    }
    release_stages();
  }

  std::span<const float> pass(std::span<const PassToken> tokens) override {
    refuse_here(tokens);
    std::span<const float> logits;
    const uint64_t n = passes_++;
    on_all([&](uint32_t g) {
      if (fault_ && fault_->gpu == ids_[g] && fault_->pass == n)
        throw std::runtime_error("a failure injected by " + std::string(kFaultVariable) + "=" + fault_->text);
      const std::span<const float> l = stages_[g]->pass(tokens);
      if (g + 1 == stages_.size()) logits = l;
    }, "pass");
    return logits;
  }
  uint32_t max_batch() const override { return stages_.front()->max_batch(); }
  uint32_t max_logit_rows() const override { return stages_.back()->max_logit_rows(); }
  uint32_t max_seqs() const override { return stages_.front()->max_seqs(); }
  void end_sequence(uint32_t seq) override {
    on_all([&](uint32_t g) { stages_[g]->end_sequence(seq); }, "end of a sequence");
  }
  void finish() override {
    if (finished_ || failed_) return;
    finished_ = true;
    on_all([&](uint32_t g) { stages_[g]->finish(); }, "finish");
  }

  ExecStats stats() const override {
    std::vector<ExecStats> per(stages_.size());
    const_cast<MultiGpuExecutor*>(this)->on_all([&](uint32_t g) { per[g] = stages_[g]->stats(); }, "stats");
    ExecStats s = sum_gpu_stats(per, ranges_);
    for (uint32_t g = 0; g < s.gpus.size() && g < devices_.size(); ++g) s.gpus[g].device = devices_[g], s.gpus[g].gpu = uint32_t(ids_[g]);
    return s;
  }

  std::string describe() const override {
    std::string d = std::to_string(stages_.size()) + " GPUs, " + split_ + ", the hidden state passed by NCCL send/recv (one host thread each)";
    std::vector<std::string> each(stages_.size());
    const_cast<MultiGpuExecutor*>(this)->on_all([&](uint32_t g) { each[g] = stages_[g]->describe(); }, "describe");
    for (uint32_t g = 0; g < each.size(); ++g) d += "; GPU " + std::to_string(ids_[g]) + ": " + each[g];
    return d;
  }

 private:
  // The refusals a GPU's executor makes, made here before any GPU runs: a pass that GPU 0 refused while
  // GPU 1 already waited for its hidden state would end in the bounded wait's abort, and the executor
  // with it; refused here, it changes nothing (pass_tokens.h), as on one GPU.
  void refuse_here(std::span<const PassToken> tokens) const {
    SeqSlots(max_seqs(), n_ctx_).check_places(tokens, max_batch());
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i].id >= n_vocab_)
        throw std::runtime_error("token id " + std::to_string(tokens[i].id) + " is outside the vocabulary");
    check_logit_rows(tokens, max_logit_rows());
  }

  // Each GPU's executor ends on its thread: its CUDA frees with its device current.
  void release_stages() {
    for (uint32_t g = 0; g < stages_.size(); ++g)
      if (stages_[g]) workers_[g]->post([this, g] { stages_[g].reset(); }).wait_for(kPassTimeout);
  }

  void on_all(const std::function<void(uint32_t)>& job, const char* what) {
    std::vector<uint32_t> all;
    for (uint32_t g = 0; g < workers_.size(); ++g) all.push_back(g);
    on_each(all, job, what);
  }

  // Runs job(g) on GPU g's thread for each g at once and waits, bounded. The first GPU that fails, or
  // the deadline, aborts the communicators so that GPUs waiting on a peer stop too; then the error,
  // naming the GPU, is thrown and the executor refuses everything after (no partial output).
  void on_each(const std::vector<uint32_t>& gpus, const std::function<void(uint32_t)>& job, const char* what,
               std::chrono::seconds limit = kPassTimeout) {
    if (failed_) throw std::runtime_error(std::string("the multi-GPU executor stopped after an earlier failure: ") + failure_);
    // Each job's end wakes this thread (no polling: a resident model's pass takes about a millisecond).
    struct Ended {
      std::mutex mu;
      std::condition_variable cv;
      size_t count = 0;
    };
    const auto ended = std::make_shared<Ended>();  // outlives this call if a GPU is left behind
    std::vector<std::future<void>> f;
    for (uint32_t g : gpus)
      f.push_back(workers_[g]->post([&job, g] { job(g); }, [ended] {
        std::lock_guard l(ended->mu);
        ++ended->count;
        ended->cv.notify_all();
      }));
    std::string error;
    auto deadline = Clock::now() + limit;
    const auto fail = [&](std::string e) {
      if (!error.empty()) return;
      error = std::move(e);
      if (comms_) comms_->abort();
      deadline = Clock::now() + kAbortTimeout;  // for the others to see the abort
    };
    for (size_t seen = 0; seen < f.size();) {
      {
        std::unique_lock l(ended->mu);
        ended->cv.wait_until(l, deadline, [&] { return ended->count > seen; });
      }
      for (size_t i = 0; i < f.size(); ++i) {
        if (!f[i].valid() || f[i].wait_for(std::chrono::seconds(0)) != std::future_status::ready) continue;
        ++seen;
        try {
          f[i].get();
        } catch (const std::exception& e) {
          fail("GPU " + std::to_string(ids_[gpus[i]]) + " (" + what + "): " + e.what());
        }
      }
      if (seen == f.size() || Clock::now() <= deadline) continue;
      if (!error.empty()) break;  // a GPU that ignored the abort: its thread is left behind
      std::string late;
      for (size_t i = 0; i < f.size(); ++i)
        if (f[i].valid()) late += " " + std::to_string(ids_[gpus[i]]);
      fail(std::string(what) + " did not end within " + std::to_string(limit.count()) + " s on GPU(s)" + late +
           " (the NCCL communicators are aborted)");
    }
    if (error.empty()) return;
    failed_ = true;
    failure_ = error;
    throw std::runtime_error(error);
  }

  std::optional<InjectedFault> fault_ = injected_fault();
  uint64_t passes_ = 0;               // passes begun (the fault hook counts them)
  std::vector<int> ids_;              // [gpu]: its CUDA device (pipeline order)
  std::vector<LayerRange> ranges_;
  std::string split_;                 // how the ranges were sized (describe())
  std::vector<std::string> devices_;  // [gpu]: the namespace it streams from
  uint32_t n_ctx_, n_vocab_;
  std::unique_ptr<NcclComms> comms_;
  std::vector<std::unique_ptr<Handoff>> handoffs_;  // [g]: between GPU g and g + 1
  std::vector<std::unique_ptr<NcclLink>> links_;
  std::vector<std::unique_ptr<GpuWorker>> workers_;  // declared after comms_: joined first
  std::vector<std::unique_ptr<Executor>> stages_;    // each made and destroyed on its GPU's thread
  bool finished_ = false, failed_ = false;
  std::string failure_;
};

}  // namespace

std::unique_ptr<Executor> make_multi_gpu_executor(std::span<host::Controller* const> controllers, const ModelOnDevice& m,
                                                  uint32_t n_ctx, const GpuExecOptions& o) {
  if (o.stage) throw std::logic_error("make_multi_gpu_executor: a layer range's executor cannot split again");
  return std::make_unique<MultiGpuExecutor>(controllers, m, n_ctx, o);
}

}  // namespace gpunvme::llm
