// gpunvme._runtime's expert fetcher over the C API: the host path (fetch / wait with a timeout) and the GPU
// path (fetch_on with ids in GPU memory, wait_gpu), and a fetch's experts as memoryviews and GPU addresses.
#ifndef GPUNVME_RUNTIME_PYTHON_RUNTIME_FETCHER_H
#define GPUNVME_RUNTIME_PYTHON_RUNTIME_FETCHER_H

#include <nanobind/nanobind.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/python/runtime_device.h"
#include "runtime/python/runtime_handles.h"

namespace gpunvme::python {

inline const char* projection_name(gpunvme_projection_t p) {
  switch (p) {
    case GPUNVME_PROJ_GATE: return "gate";
    case GPUNVME_PROJ_UP: return "up";
    case GPUNVME_PROJ_DOWN: return "down";
    case GPUNVME_PROJ_GATE_UP: return "gate_up";
  }
  return "unknown";
}

// One fetch's distinct experts; valid until the fetcher's next fetch.
class Fetch {
 public:
  // waited: the GPU path's, described after its wait (gpunvme_fetcher_wait_gpu).
  Fetch(std::shared_ptr<FetcherOwner> f, uint32_t layer, std::vector<uint32_t> experts, bool waited = false)
      : f_(std::move(f)), gen_(f_->generation), layer_(layer), experts_(std::move(experts)), waited_(waited) {}
  uint32_t layer() const { return layer_; }
  const std::vector<uint32_t>& experts() const { return experts_; }
  bool waited() const { return waited_; }
  void wait(double timeout) {
    current();
    if (waited_) {  // a GPU fetch (or one waited for already): the timeout still has to be a valid one
      check_timeout(timeout);
      return;
    }
    gpunvme_fetcher_t* h = f_->handle;
    for (uint32_t i = 0; i < experts_.size(); ++i) {
      wait_for(timeout, "expert " + std::to_string(experts_[i]) + " of layer " + std::to_string(layer_),
               [&](int* r) { return gpunvme_fetcher_ready(h, i, r); });
      check(gpunvme_fetcher_wait(h, i));  // ready: returns at once, or raises a failed read
    }
    waited_ = true;
  }
  // (expert id, hit, whole span, its GPU address, [(projection, bytes, GPU address)...]) of the index-th
  // distinct expert; GPU addresses are 0 where the scratchpad has no GPU view.
  using Part = std::tuple<std::string, ByteView, uint64_t>;
  std::tuple<uint32_t, bool, ByteView, uint64_t, std::vector<Part>> expert(uint32_t index) const {
    current();
    if (!waited_) raise_kind(PyExc_ValueError, "the experts are not in yet: call Fetch.wait(timeout=...) first");
    if (index >= experts_.size())
      raise_kind(PyExc_IndexError, "index " + std::to_string(index) + " is past the fetch's " +
                                       std::to_string(experts_.size()) + " distinct experts");
    gpunvme_fetched_expert_t x{};
    check(gpunvme_fetcher_expert(f_->handle, index, &x));
    const void *host = nullptr, *device = nullptr;
    check(gpunvme_fetcher_scratchpad(f_->handle, &host, &device, nullptr));
    const auto at = [&](uint64_t off) { return device ? uint64_t(reinterpret_cast<uintptr_t>(device)) + off : 0; };
    const uint8_t* pad = static_cast<const uint8_t*>(host);
    std::vector<Part> parts;
    for (uint32_t k = 0; k < x.n_parts; ++k) {
      gpunvme_projection_t proj{};
      uint64_t off = 0, bytes = 0;
      check(gpunvme_fetcher_part(f_->handle, index, k, &proj, &off, &bytes));
      parts.emplace_back(projection_name(proj), bytes_view(pad + off, bytes, f_), at(off));
    }
    return {x.expert, x.hit != 0, bytes_view(pad + x.offset, x.bytes, f_), at(x.offset), std::move(parts)};
  }

 private:
  void current() const {
    if (!f_->open) raise_kind(PyExc_ValueError, "the Fetcher of this fetch is closed; make another: Model.fetcher()");
    if (f_->generation != gen_)
      raise_kind(PyExc_ValueError, "a later Fetcher.fetch() replaced this fetch (its scratchpad bytes may be reused); "
                                   "use the latest Fetch");
  }
  std::shared_ptr<FetcherOwner> f_;
  uint64_t gen_;
  uint32_t layer_;
  std::vector<uint32_t> experts_;
  bool waited_ = false;
};

class Fetcher {
 public:
  Fetcher(const Model& m, uint32_t max_experts, uint64_t cache_bytes, bool down_only, bool pump_thread)
      : h_(std::make_shared<FetcherOwner>()), max_experts_(max_experts ? max_experts : 8) {
    const gpunvme_fetcher_opts_t o = options(m, cache_bytes, pump_thread);
    check(gpunvme_fetcher_create_from_model(h_->model->queue, h_->model->model, parts(down_only), &o, &h_->handle));
  }
  // The GPU path: kernels on `gq` read the experts whose ids a kernel wrote to GPU memory.
  Fetcher(const Model& m, const GpuQueues& gq, uint32_t max_experts, uint64_t cache_bytes, bool down_only)
      : h_(std::make_shared<FetcherOwner>()), max_experts_(max_experts ? max_experts : 8) {
    const gpunvme_fetcher_opts_t o = options(m, cache_bytes, false);
    h_->gpu_queues = gq.get();
    check(gpunvme_fetcher_create_gpu_from_model(h_->gpu_queues->gq, h_->model->model, parts(down_only), &o, &h_->handle));
  }
  // Enqueues on `stream` the fetch of `layer`'s experts named by the n uint32 ids at GPU address device_ids.
  void fetch_on(int64_t layer_id, uint64_t device_ids, uint32_t n, uint64_t stream) {
    gpunvme_fetcher_t* f = handle();
    const uint32_t layer = check_index("layer", layer_id, h_->model->layers, "the model");
    ++h_->generation;  // the previous Fetch ends here, whatever this call's outcome
    check(gpunvme_fetcher_fetch_on(f, layer, reinterpret_cast<const uint32_t*>(uintptr_t(device_ids)), n,
                                   cuda_stream(stream)));
    gpu_layer_ = layer;
  }
  // Waits (bounded by the C API) for the latest fetch_on; its experts, described as the CPU path's.
  Fetch wait_gpu() {
    gpunvme_fetcher_t* f = handle();
    uint32_t n = 0;
    gpunvme_err_t e = GPUNVME_OK;
    std::string msg;
    {
      nb::gil_scoped_release unlocked;
      e = gpunvme_fetcher_wait_gpu(f, &n);
      if (e != GPUNVME_OK) msg = gpunvme_last_error_message();
    }
    if (e != GPUNVME_OK) raise_error(e, msg);
    std::vector<uint32_t> ids(n);
    for (uint32_t i = 0; i < n; ++i) {
      gpunvme_fetched_expert_t x{};
      check(gpunvme_fetcher_expert(f, i, &x));
      ids[i] = x.expert;
    }
    return Fetch(h_, gpu_layer_, std::move(ids), true);
  }
  // GPU addresses of the result struct, experts[] and selection[] (gpunvme_gpu_fetch_result_t etc.).
  std::tuple<uint64_t, uint64_t, uint64_t> device_result() {
    const gpunvme_gpu_fetch_result_t* r = nullptr;
    const gpunvme_gpu_fetched_expert_t* x = nullptr;
    const uint32_t* sel = nullptr;
    check(gpunvme_fetcher_device_result(handle(), &r, &x, &sel));
    return {reinterpret_cast<uintptr_t>(r), reinterpret_cast<uintptr_t>(x), reinterpret_cast<uintptr_t>(sel)};
  }
  bool closed() const { return !h_->open; }
  void close() { h_->open = false; }
  uint32_t max_experts() const { return max_experts_; }
  Fetch fetch(int64_t layer_id, const std::vector<int64_t>& ids) {
    gpunvme_fetcher_t* f = handle();
    const uint32_t layers = h_->model->layers, experts = h_->model->experts;
    const uint32_t layer = check_index("layer", layer_id, layers, "the model");
    std::vector<uint32_t> distinct, all;
    for (int64_t id : ids) {
      const uint32_t e = check_index("expert", id, experts, "layer " + std::to_string(layer));
      all.push_back(e);
      if (std::find(distinct.begin(), distinct.end(), e) == distinct.end()) distinct.push_back(e);
    }
    if (distinct.empty()) raise_kind(PyExc_ValueError, "no expert ids given: pass the ids the router chose");
    if (distinct.size() > max_experts_)
      raise_kind(PyExc_ValueError, std::to_string(distinct.size()) + " distinct experts asked for, more than the fetcher's " +
                                       std::to_string(max_experts_) + " (Model.fetcher(max_experts=N) for more)");
    uint32_t n = 0;
    ++h_->generation;  // the previous Fetch ends here, whatever this call's outcome
    check(gpunvme_fetcher_fetch(f, layer, all.data(), uint32_t(all.size()), &n));
    return Fetch(h_, layer, std::move(distinct));
  }
  nb::dict metrics() {
    gpunvme_fetch_metrics_t m{};
    check(gpunvme_fetcher_metrics(handle(), &m));
    nb::dict d;
    d["fetches"] = m.tokens;
    d["requested"] = m.requested;
    d["faults"] = m.faults;
    d["hits"] = m.hits;
    d["bytes_read"] = m.bytes_read;
    d["cache_capacity"] = m.cache_capacity;
    return d;
  }

 private:
  gpunvme_fetcher_t* handle() const { return live(h_, "Fetcher", "make another: Model.fetcher()").handle; }
  gpunvme_fetcher_opts_t options(const Model& m, uint64_t cache_bytes, bool pump_thread) {
    h_->model = m.get();
    if (!h_->model->experts)
      raise_kind(PyExc_ValueError, "the model has no experts (a dense model): stream its layers with Model.streamer()");
    gpunvme_fetcher_opts_t o{};
    o.max_experts_per_fetch = max_experts_;
    o.cache_bytes = cache_bytes;
    o.pump_thread = pump_thread;
    return o;
  }
  static gpunvme_expert_parts_t parts(bool down_only) { return down_only ? GPUNVME_EXPERTS_DOWN_ONLY : GPUNVME_EXPERTS_ALL; }
  std::shared_ptr<FetcherOwner> h_;
  uint32_t max_experts_;
  uint32_t gpu_layer_ = 0;
};


}  // namespace gpunvme::python

#endif  // GPUNVME_RUNTIME_PYTHON_RUNTIME_FETCHER_H
