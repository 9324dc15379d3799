// gpunvme._runtime's layer streamer over the C API: the host path (begin / acquire, memoryviews of the
// slots) and the GPU path (begin_on / wait_on on CUDA streams, GPU addresses), and the slots they hand over.
#ifndef GPUNVME_RUNTIME_PYTHON_RUNTIME_STREAMER_H
#define GPUNVME_RUNTIME_PYTHON_RUNTIME_STREAMER_H

#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/python/runtime_device.h"
#include "runtime/python/runtime_handles.h"

namespace gpunvme::python {

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


}  // namespace gpunvme::python

#endif  // GPUNVME_RUNTIME_PYTHON_RUNTIME_STREAMER_H
