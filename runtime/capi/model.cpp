// Model handles: a GGUF model found on a namespace, and its tensors' extents.
#include <algorithm>

#include "runtime/capi/capi_internal.h"
#include "runtime/io/cpu_block_io.h"

using namespace gpunvme;
using namespace gpunvme::capi;

extern "C" {

gpunvme_err_t gpunvme_model_open(gpunvme_queue_t* queue, uint32_t nsid, int64_t start_lba_hint, gpunvme_model_t** out) {
  return guard("gpunvme_model_open", [&] {
    if (out) *out = nullptr;
    auto held = claim(queue, "queue");
    GPUNVME_NEED(out);
    queue->check_not_driven();
    auto m = std::make_unique<gpunvme_model>();
    m->queue = queue;
    host::Controller& ctrl = *queue->ctrl->ctrl;
    const model::BlockIo io = model::cpu_block_io(ctrl, *queue->qp, nsid == 0 ? 1 : nsid, ctrl.transport().name());
    std::optional<uint64_t> hint;
    if (start_lba_hint >= 0) hint = uint64_t(start_lba_hint);
    m->detected = model::detect_model(io, hint);
    m->file = std::make_unique<gguf::GgufFile>(model::read_model_header(io, m->detected));
    m->map = std::make_unique<model::LbaMap>(*m->file, io.lba_size, m->detected.start_lba);
    *out = m.release();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_model_close(gpunvme_model_t* model) {
  return guard("gpunvme_model_close", [&] {
    if (!model) return GPUNVME_OK;
    auto held = claim(model, "model");
    destroy(model, held);
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_model_layer_count(gpunvme_model_t* model, uint32_t* count) {
  return guard("gpunvme_model_layer_count", [&] {
    const auto& layers = live(model, "model").map->layers();
    GPUNVME_NEED(count);
    *count = layers.empty() ? 0 : layers.back().layer + 1;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_model_expert_count(gpunvme_model_t* model, uint32_t* count) {
  return guard("gpunvme_model_expert_count", [&] {
    const auto& experts = live(model, "model").map->experts();
    GPUNVME_NEED(count);
    uint32_t n = 0;
    for (const auto& e : experts) n = std::max(n, e.expert + 1);
    *count = n;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_model_tensor(gpunvme_model_t* model, const char* name, gpunvme_extent_t* extent,
                                   uint64_t* file_offset) {
  return guard("gpunvme_model_tensor", [&] {
    const model::LbaMap& map = *live(model, "model").map;
    GPUNVME_NEED(name);
    const model::TensorExtent* t = map.find(name);
    if (!t) return fail(GPUNVME_ERR_NOT_FOUND, std::string("gpunvme_model_tensor: no tensor named '") + name + "'");
    if (extent) *extent = from_extent(t->extent);
    if (file_offset) *file_offset = t->tensor->file_offset;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_model_start_lba(gpunvme_model_t* model, uint64_t* start_lba) {
  return guard("gpunvme_model_start_lba", [&] {
    const uint64_t lba = live(model, "model").detected.start_lba;
    GPUNVME_NEED(start_lba);
    *start_lba = lba;
    return GPUNVME_OK;
  });
}

}  // extern "C"
