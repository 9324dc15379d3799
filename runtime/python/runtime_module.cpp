// gpunvme._runtime: the runtime's layer streamer and expert fetcher for engine authors who write Python,
// bound with nanobind over the C API (runtime/capi/gpunvme.h, which wraps runtime/stream): its checks,
// error messages and thread rules hold here as they do for C users. What this layer adds: Python objects
// that free their handles in the C API's order whatever Python frees first (runtime_handles.h), zero-copy
// read-only memoryviews of slot and scratchpad bytes, waits with the caller's timeout, and checks of
// layer and expert ids that name the model's range. gpunvme/runtime.py is the documented face.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/python/runtime_handles.h"

namespace gpunvme::python {
namespace {

// ValueError unless 0 <= index < n: "<what> 9 does not exist: <owner> has 2 <what>s (0..1)<hint>". Ids
// come in as int64 so that a negative one gets this message too, not a binding's type error.
uint32_t check_index(const char* what, int64_t index, uint32_t n, const std::string& owner, const char* hint = "") {
  if (index >= 0 && index < int64_t(n)) return uint32_t(index);
  raise_kind(PyExc_ValueError, std::string(what) + " " + std::to_string(index) + " does not exist: " + owner + " has " +
                                   std::to_string(n) + " " + what + "s" +
                                   (n ? " (0.." + std::to_string(n - 1) + ")" : std::string(" (none)")) + hint);
}

template <class P>
P& live(const std::shared_ptr<P>& p, const char* what, const char* fix) {
  if (!p || !p->open) raise_kind(PyExc_ValueError, std::string("this ") + what + " is closed; " + fix);
  return *p;
}

class Model;
class Streamer;
class Fetcher;

class Device {
 public:
  Device(const std::string& spec, uint32_t queue_entries) : h_(std::make_shared<CtrlOwner>()) {
    h_->spec = spec;
    h_->queue_entries = queue_entries;
    check(gpunvme_ctrl_init(&h_->ctrl, spec.c_str()));
    gpunvme_ctrl_info_t i{};
    check(gpunvme_ctrl_info(h_->ctrl, &i));
    h_->qid_used.assign(size_t(i.io_queues) + 1, false);
  }
  const std::shared_ptr<CtrlOwner>& get() const {
    if (!h_) raise_kind(PyExc_ValueError, "this Device is closed; open another: gpunvme.runtime.Device(spec)");
    return h_;
  }
  void close() { h_.reset(); }
  bool closed() const { return !h_; }
  std::string spec() const { return get()->spec; }
  nb::dict info() const {
    gpunvme_ctrl_info_t i{};
    check(gpunvme_ctrl_info(get()->ctrl, &i));
    uint64_t blocks = 0;
    uint32_t lba = 0;
    check(gpunvme_ns_info(get()->ctrl, 1, &blocks, &lba));
    nb::dict d;
    d["io_queues"] = i.io_queues;
    d["max_queue_entries"] = i.max_queue_entries;
    d["max_transfer_bytes"] = i.max_transfer_bytes;
    d["namespaces"] = i.namespaces;
    d["blocks"] = blocks;
    d["block_bytes"] = lba;
    return d;
  }

 private:
  std::shared_ptr<CtrlOwner> h_;
};

class Model {
 public:
  Model(Device& dev, uint32_t nsid, std::optional<int64_t> start_lba) : h_(std::make_shared<ModelOwner>()) {
    h_->ctrl = dev.get();
    CtrlOwner& c = *h_->ctrl;
    h_->qid = c.take_qids(1);
    check(gpunvme_create_io_queue(c.ctrl, h_->qid, c.queue_entries, &h_->queue));
    check(gpunvme_model_open(h_->queue, nsid, start_lba.value_or(-1), &h_->model));
    check(gpunvme_model_layer_count(h_->model, &h_->layers));
    check(gpunvme_model_expert_count(h_->model, &h_->experts));
  }
  const std::shared_ptr<ModelOwner>& get() const {
    if (!h_) raise_kind(PyExc_ValueError, "this Model is closed; open it again: Device.open_model()");
    return h_;
  }
  void close() { h_.reset(); }
  uint32_t n_layers() const { return get()->layers; }
  uint32_t n_experts() const { return get()->experts; }
  // (absolute file offset, bytes) of a tensor.
  std::pair<uint64_t, uint64_t> tensor(const std::string& name) const {
    gpunvme_extent_t x{};
    uint64_t off = 0;
    const gpunvme_err_t e = gpunvme_model_tensor(get()->model, name.c_str(), &x, &off);
    if (e == GPUNVME_ERR_NOT_FOUND) raise_kind(PyExc_KeyError, "the model has no tensor named '" + name + "'");
    check(e);
    return {off, x.byte_length};
  }

 private:
  std::shared_ptr<ModelOwner> h_;
};

// A GPU queue set: `count` queue pairs that GPU warps drive (the GPU path's streamers read through them).
class GpuQueues {
 public:
  GpuQueues(Device& dev, uint32_t count, uint32_t entries) : h_(std::make_shared<GpuQueuesOwner>()) {
    h_->ctrl = dev.get();
    check(gpunvme_gpu_available());  // before taking qids: the reason (no CUDA, no GPU) is the error
    if (count == 0) raise_kind(PyExc_ValueError, "count must be at least 1 (GPU queues, one warp each)");
    h_->first = h_->ctrl->take_qids(count);
    h_->count = count;
    check(gpunvme_gpu_queues_create(h_->ctrl->ctrl, h_->first, count, entries, &h_->gq));
  }
  const std::shared_ptr<GpuQueuesOwner>& get() const {
    if (!h_) raise_kind(PyExc_ValueError, "these GpuQueues are closed; make others: Device.gpu_queues()");
    return h_;
  }
  void close() { h_.reset(); }
  std::pair<uint32_t, uint32_t> qids() const { return {get()->first, get()->first + get()->count - 1}; }

 private:
  std::shared_ptr<GpuQueuesOwner> h_;
};

gpunvme_cuda_stream_t cuda_stream(uint64_t address) { return reinterpret_cast<gpunvme_cuda_stream_t>(uintptr_t(address)); }

// A slot as the streamer handed it over (acquire, or wait_on on the GPU path), until it is released:
// what both kinds share. `again` names how to get the layer again, for the error after a release.
class SlotBase {
 public:
  SlotBase(std::shared_ptr<StreamerOwner> s, uint32_t slot, const gpunvme_slot_view_t& v, const char* again)
      : s_(std::move(s)), slot_(slot), gen_(s_->slot_generation[slot]), v_(v), again_(again) {}
  uint32_t slot() const { return slot_; }
  uint32_t layer() const { return v_.layer; }
  uint64_t nbytes() const { return v_.bytes; }
  uint64_t device_ptr() const { return reinterpret_cast<uintptr_t>(held().device); }
  bool released() const { return !s_->open || s_->slot_generation[slot_] != gen_; }
  // (slot offset, bytes) of each extent of the layer, in plan order.
  std::vector<std::pair<uint64_t, uint64_t>> pieces() const {
    held();
    std::vector<std::pair<uint64_t, uint64_t>> out(v_.n_pieces);
    for (uint32_t i = 0; i < v_.n_pieces; ++i) check(gpunvme_streamer_piece(s_->handle, slot_, i, &out[i].first, &out[i].second));
    return out;
  }

 protected:
  // (slot offset, bytes) of tensor `name`; KeyError when it is not part of this layer.
  std::pair<uint64_t, uint64_t> locate(const Model& m, const std::string& name) const {
    held();
    const auto [file_offset, bytes] = m.tensor(name);
    uint64_t at = 0;
    const gpunvme_err_t e = gpunvme_streamer_locate(s_->handle, slot_, file_offset, &at);
    if (e == GPUNVME_ERR_NOT_FOUND)
      raise_kind(PyExc_KeyError, "tensor '" + name + "' is not part of layer " + std::to_string(v_.layer) +
                                     " (held in slot " + std::to_string(slot_) + ")" +
                                     (m.get()->experts ? "; expert tensors come from Model.fetcher()" : ""));
    check(e);
    return {at, bytes};
  }
  // Hands the slot back through `release` (a C API call on the streamer's handle); twice, or after the
  // streamer closed: nothing left to hand back.
  template <class Release>
  void release_with(Release release) {
    if (released()) return;
    check(release(s_->handle, slot_));
    ++s_->slot_generation[slot_];
  }
  const gpunvme_slot_view_t& held() const {
    if (released())
      raise_kind(PyExc_ValueError, "slot " + std::to_string(slot_) + " (layer " + std::to_string(v_.layer) +
                                       ") was released or its streamer closed; " + again_ + " the layer again");
    return v_;
  }
  std::shared_ptr<StreamerOwner> s_;

 private:
  uint32_t slot_;
  uint64_t gen_;
  gpunvme_slot_view_t v_;
  const char* again_;
};

// A slot of a GPU streamer after wait_on: GPU addresses only (the host view is valid once the compute
// stream passed the wait, which this layer cannot know), until release_on().
class GpuSlot : public SlotBase {
 public:
  GpuSlot(std::shared_ptr<StreamerOwner> s, uint32_t slot, const gpunvme_slot_view_t& v, const uint32_t* status)
      : SlotBase(std::move(s), slot, v, "wait_on"), status_(status) {}
  uint64_t status_ptr() const { return held(), reinterpret_cast<uintptr_t>(status_); }
  // (GPU address, bytes) of tensor `name` of this layer.
  std::pair<uint64_t, uint64_t> tensor(const Model& m, const std::string& name) const {
    const auto [at, bytes] = locate(m, name);
    return {reinterpret_cast<uintptr_t>(held().device) + at, bytes};
  }
  void release_on(uint64_t stream) {
    release_with([&](gpunvme_streamer_t* h, uint32_t k) { return gpunvme_streamer_release_on(h, k, cuda_stream(stream)); });
  }

 private:
  const uint32_t* status_;
};

// A held slot: the bytes of one layer, until release().
class Slot : public SlotBase {
 public:
  Slot(std::shared_ptr<StreamerOwner> s, uint32_t slot, const gpunvme_slot_view_t& v) : SlotBase(std::move(s), slot, v, "acquire") {}
  ByteView data() const { return bytes_view(held().host, held().bytes, s_); }
  ByteView tensor(const Model& m, const std::string& name) const {
    const auto [at, bytes] = locate(m, name);
    return bytes_view(static_cast<const uint8_t*>(held().host) + at, bytes, s_);
  }
  void release() { release_with(gpunvme_streamer_release); }
};

class Streamer {
 public:
  Streamer(const Model& m, uint32_t slots, bool skip_experts, uint32_t max_command_bytes, bool pump_thread)
      : h_(std::make_shared<StreamerOwner>()), n_layers_(m.n_layers()), n_slots_(slots ? slots : 2) {
    h_->model = m.get();
    gpunvme_streamer_opts_t o{};
    o.slots = n_slots_;
    o.max_command_bytes = max_command_bytes;
    o.pump_thread = pump_thread;
    check(gpunvme_streamer_create_from_model(h_->model->queue, h_->model->model, skip_experts, &o, &h_->handle));
    h_->slot_generation.assign(n_slots_, 0);
  }
  // The GPU path: reads issued by kernels on the GPU queue set `gq`, ordered on CUDA streams.
  Streamer(const Model& m, const GpuQueues& gq, uint32_t slots, bool skip_experts, uint32_t max_command_bytes)
      : h_(std::make_shared<StreamerOwner>()), n_layers_(m.n_layers()), n_slots_(slots ? slots : 2) {
    h_->model = m.get();
    h_->gpu_queues = gq.get();
    gpunvme_streamer_opts_t o{};
    o.slots = n_slots_;
    o.max_command_bytes = max_command_bytes;
    check(gpunvme_streamer_create_gpu_from_model(h_->gpu_queues->gq, h_->model->model, skip_experts, &o, &h_->handle));
    h_->slot_generation.assign(n_slots_, 0);
  }
  void begin_on(int64_t layer, int64_t slot, uint64_t stream) {
    s();
    check(gpunvme_streamer_begin_on(h_->handle, check_index("layer", layer, n_layers_, "the streamer's plan"),
                                    check_slot(slot), cuda_stream(stream)));
  }
  GpuSlot wait_on(int64_t index, uint64_t stream) {
    s();
    const uint32_t slot = check_slot(index);
    gpunvme_slot_view_t v{};
    check(gpunvme_streamer_wait_on(h_->handle, slot, cuda_stream(stream), &v));
    const uint32_t* status = nullptr;
    check(gpunvme_streamer_status(h_->handle, slot, &status));
    return GpuSlot(h_, slot, v, status);
  }
  void sync() {
    gpunvme_streamer_t* st = s();
    gpunvme_err_t e = GPUNVME_OK;
    std::string msg;
    {
      nb::gil_scoped_release unlocked;  // bounded by the C API; other threads run meanwhile
      e = gpunvme_streamer_sync(st);
      if (e != GPUNVME_OK) msg = gpunvme_last_error_message();
    }
    if (e != GPUNVME_OK) raise_error(e, msg);
  }
  uint32_t n_layers() const { return n_layers_; }
  uint32_t n_slots() const { return n_slots_; }
  bool closed() const { return !h_->open; }
  void close() { h_->open = false; }  // the handle goes with the last view of its slots
  void begin(int64_t layer, int64_t slot) {
    s();
    check(gpunvme_streamer_begin(h_->handle, check_index("layer", layer, n_layers_, "the streamer's plan"),
                                 check_slot(slot)));
  }
  bool ready(int64_t slot) {
    s();
    int r = 0;
    check(gpunvme_streamer_ready(h_->handle, check_slot(slot), &r));
    return r != 0;
  }
  Slot acquire(int64_t index, double timeout) {
    s();
    const uint32_t slot = check_slot(index);
    gpunvme_streamer_t* st = h_->handle;
    wait_for(timeout, "slot " + std::to_string(slot) + "'s layer",
             [&](int* r) { return gpunvme_streamer_ready(st, slot, r); });
    gpunvme_slot_view_t v{};
    check(gpunvme_streamer_wait(st, slot, &v));  // ready: returns at once
    return Slot(h_, slot, v);
  }
  nb::dict stats() {
    gpunvme_stream_stats_t st{};
    check(gpunvme_streamer_stats(s(), &st));
    nb::dict d;
    d["layers"] = st.layers;
    d["bytes"] = st.bytes;
    d["io_seconds"] = st.io_seconds;
    d["wait_seconds"] = st.wait_seconds;
    d["slot_bytes"] = st.slot_bytes;
    return d;
  }

 private:
  gpunvme_streamer_t* s() const { return live(h_, "Streamer", "make another: Model.streamer()").handle; }
  uint32_t check_slot(int64_t slot) const {
    return check_index("slot", slot, n_slots_, "the streamer", " (Model.streamer(slots=N) for more)");
  }
  std::shared_ptr<StreamerOwner> h_;
  uint32_t n_layers_, n_slots_;
};

const char* projection_name(gpunvme_projection_t p) {
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

}  // namespace
}  // namespace gpunvme::python

using namespace gpunvme::python;

NB_MODULE(_runtime, m) {
  m.doc() = "gpunvme's runtime (the C API's layer streamer and expert fetcher), bound with nanobind; use gpunvme.runtime";
  m.def("gpu_available", [] { return gpunvme_gpu_available() == GPUNVME_OK; },
        "True when this build and process can use the GPU path (CUDA build, a GPU present).");
  nb::class_<Device>(m, "Device", "A controller (an emulated one: 'emu:FILE', 'emu:ram,size=256M'; or 'vfio:BDF').")
      .def(nb::init<const std::string&, uint32_t>(), nb::arg("spec"), nb::arg("queue_entries") = 256)
      .def_prop_ro("spec", &Device::spec)
      .def_prop_ro("closed", &Device::closed)
      .def("info", &Device::info)
      .def("close", &Device::close);
  nb::class_<Model>(m, "Model", "A GGUF model on the device's namespace, with an I/O queue of its own.")
      .def(nb::init<Device&, uint32_t, std::optional<int64_t>>(), nb::arg("device"), nb::arg("nsid") = 1,
           nb::arg("start_lba").none() = nb::none())
      .def_prop_ro("n_layers", &Model::n_layers)
      .def_prop_ro("n_experts", &Model::n_experts)
      .def("tensor", &Model::tensor, nb::arg("name"))
      .def("close", &Model::close);
  nb::class_<GpuQueues>(m, "GpuQueues", "A GPU queue set: queue pairs driven by GPU warps.")
      .def(nb::init<Device&, uint32_t, uint32_t>(), nb::arg("device"), nb::arg("count"), nb::arg("entries"))
      .def_prop_ro("qids", &GpuQueues::qids)
      .def("close", &GpuQueues::close);
  nb::class_<SlotBase>(m, "SlotBase", "What held slots of both paths share.")
      .def_prop_ro("slot", &SlotBase::slot)
      .def_prop_ro("layer", &SlotBase::layer)
      .def_prop_ro("nbytes", &SlotBase::nbytes)
      .def_prop_ro("device_ptr", &SlotBase::device_ptr)
      .def_prop_ro("released", &SlotBase::released)
      .def("pieces", &SlotBase::pieces);
  nb::class_<GpuSlot, SlotBase>(m, "GpuSlot", "A slot of a GPU streamer, waited for on a CUDA stream.")
      .def_prop_ro("status_ptr", &GpuSlot::status_ptr)
      .def("tensor", &GpuSlot::tensor, nb::arg("model"), nb::arg("name"))
      .def("release_on", &GpuSlot::release_on, nb::arg("stream"));
  nb::class_<Slot, SlotBase>(m, "Slot", "A held slot of a Streamer: one layer's bytes.")
      .def("data", &Slot::data)
      .def("tensor", &Slot::tensor, nb::arg("model"), nb::arg("name"))
      .def("release", &Slot::release);
  nb::class_<Streamer>(m, "Streamer", "The layer streamer.")
      .def(nb::init<const Model&, uint32_t, bool, uint32_t, bool>(), nb::arg("model"), nb::arg("slots"),
           nb::arg("skip_experts"), nb::arg("max_command_bytes"), nb::arg("pump_thread"))
      .def_prop_ro("n_layers", &Streamer::n_layers)
      .def_prop_ro("n_slots", &Streamer::n_slots)
      .def_prop_ro("closed", &Streamer::closed)
      .def(nb::init<const Model&, const GpuQueues&, uint32_t, bool, uint32_t>(), nb::arg("model"), nb::arg("gpu_queues"),
           nb::arg("slots"), nb::arg("skip_experts"), nb::arg("max_command_bytes"))
      .def("begin", &Streamer::begin, nb::arg("layer"), nb::arg("slot"))
      .def("begin_on", &Streamer::begin_on, nb::arg("layer"), nb::arg("slot"), nb::arg("stream"))
      .def("wait_on", &Streamer::wait_on, nb::arg("slot"), nb::arg("stream"))
      .def("sync", &Streamer::sync)
      .def("ready", &Streamer::ready, nb::arg("slot"))
      .def("acquire", &Streamer::acquire, nb::arg("slot"), nb::arg("timeout"))
      .def("stats", &Streamer::stats)
      .def("close", &Streamer::close);
  nb::class_<Fetch>(m, "Fetch", "One fetch's experts.")
      .def_prop_ro("layer", &Fetch::layer)
      .def_prop_ro("experts", &Fetch::experts)
      .def_prop_ro("waited", &Fetch::waited)
      .def("wait", &Fetch::wait, nb::arg("timeout"))
      .def("expert", &Fetch::expert, nb::arg("index"));
  nb::class_<Fetcher>(m, "Fetcher", "The expert fetcher.")
      .def(nb::init<const Model&, uint32_t, uint64_t, bool, bool>(), nb::arg("model"), nb::arg("max_experts"),
           nb::arg("cache_bytes"), nb::arg("down_only"), nb::arg("pump_thread"))
      .def_prop_ro("max_experts", &Fetcher::max_experts)
      .def_prop_ro("closed", &Fetcher::closed)
      .def(nb::init<const Model&, const GpuQueues&, uint32_t, uint64_t, bool>(), nb::arg("model"), nb::arg("gpu_queues"),
           nb::arg("max_experts"), nb::arg("cache_bytes"), nb::arg("down_only"))
      .def("fetch", &Fetcher::fetch, nb::arg("layer"), nb::arg("experts"))
      .def("fetch_on", &Fetcher::fetch_on, nb::arg("layer"), nb::arg("device_ids"), nb::arg("n"), nb::arg("stream"))
      .def("wait_gpu", &Fetcher::wait_gpu)
      .def("device_result", &Fetcher::device_result)
      .def("metrics", &Fetcher::metrics)
      .def("close", &Fetcher::close);
}
