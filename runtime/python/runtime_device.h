// gpunvme._runtime's Device (a controller), Model (a GGUF on it, with an I/O queue of its own) and GpuQueues
// (queue pairs GPU warps drive), over the C API.
#ifndef GPUNVME_RUNTIME_PYTHON_RUNTIME_DEVICE_H
#define GPUNVME_RUNTIME_PYTHON_RUNTIME_DEVICE_H

#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "runtime/python/runtime_handles.h"

namespace gpunvme::python {

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


}  // namespace gpunvme::python

#endif  // GPUNVME_RUNTIME_PYTHON_RUNTIME_DEVICE_H
