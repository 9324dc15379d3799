// Layer streamer handles: the one create helper, the slot life cycle with its checks, stats.
#include "runtime/capi/capi_internal.h"
#include "runtime/plan/command_plan.h"

using namespace gpunvme;
using namespace gpunvme::capi;

namespace gpunvme::capi {
namespace {

stream::StreamerOptions streamer_options(const gpunvme_streamer_opts_t* o) {
  stream::StreamerOptions so;
  if (o) {
    if (o->slots) so.slots = o->slots;
    if (o->nsid) so.nsid = o->nsid;
    so.max_command_bytes = o->max_command_bytes;
  }
  return so;
}

}  // namespace

Layers extent_layers(const gpunvme_extent_t* extents, const uint32_t* layer_first,
                                                      uint32_t n_layers) {
  GPUNVME_NEED(extents);
  GPUNVME_NEED(layer_first);
  std::vector<std::vector<model::Extent>> layers(n_layers);
  for (uint32_t l = 0; l < n_layers; ++l) {
    if (layer_first[l + 1] < layer_first[l]) refuse("layer_first is not ascending at layer " + std::to_string(l));
    for (uint32_t i = layer_first[l]; i < layer_first[l + 1]; ++i) layers[l].push_back(to_extent(extents[i]));
  }
  return layers;
}

Layers model_layers(SubmitterSource& src, const gpunvme_model* model,
                                                     int skip_experts) {
  live(model, "model");
  if (model->queue->ctrl->ctrl.get() != &src.controller())
    refuse("the model was opened on another controller than the queue(s) given");
  return plan::layer_extents(*model->map, skip_experts != 0);
}

gpunvme_err_t make_streamer(SubmitterSource& src, Layers layers,
                            const gpunvme_streamer_opts_t* opts, const gpunvme_model* model, gpunvme_streamer_t** out) {
  GPUNVME_NEED(out);
  auto s = std::make_unique<gpunvme_streamer>();
  stream::Submitter& sub = s->use.attach(src, opts && opts->pump_thread);
  s->s = std::make_unique<stream::LayerStreamer>(src.controller(), sub, std::move(layers), streamer_options(opts));
  s->lba = s->s->lba_bytes();
  s->status.assign(s->s->slot_count(), nullptr);
  if (model) s->model_start_lba = model->detected.start_lba;
  *out = s.release();
  return GPUNVME_OK;
}

void check_slot(const gpunvme_streamer& s, uint32_t slot) {
  if (slot >= s.s->slot_count())
    refuse("slot " + std::to_string(slot) + " does not exist (" + std::to_string(s.s->slot_count()) + " slots)");
}

namespace {

stream::SlotView held_view(gpunvme_streamer& s, uint32_t slot) {
  check_slot(s, slot);
  using St = stream::LayerStreamer::SlotState;
  const St st = s.s->slot_state(slot);
  if (st != St::kHeld)
    refuse("slot " + std::to_string(slot) + " is " + (st == St::kFree ? "free" : "still loading") +
           "; gpunvme_streamer_wait (or _wait_on) for it first");
  return s.s->wait(slot);  // a held slot: returns at once
}

}  // namespace

void fill_view(const stream::SlotView& v, gpunvme_slot_view_t* view) {
  if (!view) return;
  view->host = v.host;
  view->device = v.device;
  view->bytes = v.bytes;
  view->layer = v.layer;
  view->n_pieces = uint32_t(v.plan->pieces.size());
}

}  // namespace gpunvme::capi

extern "C" {

gpunvme_err_t gpunvme_streamer_create(gpunvme_queue_t* queue, const gpunvme_extent_t* extents, const uint32_t* layer_first,
                                      uint32_t n_layers, const gpunvme_streamer_opts_t* opts, gpunvme_streamer_t** out) {
  return guard("gpunvme_streamer_create", [&] {
    if (out) *out = nullptr;
    gpunvme_queue& q = live(queue, "queue");
    return make_streamer(q, extent_layers(extents, layer_first, n_layers), opts, nullptr, out);
  });
}

gpunvme_err_t gpunvme_streamer_create_from_model(gpunvme_queue_t* queue, gpunvme_model_t* model, int skip_experts,
                                                 const gpunvme_streamer_opts_t* opts, gpunvme_streamer_t** out) {
  return guard("gpunvme_streamer_create_from_model", [&] {
    if (out) *out = nullptr;
    gpunvme_queue& q = live(queue, "queue");
    return make_streamer(q, model_layers(q, model, skip_experts), opts, model, out);
  });
}

gpunvme_err_t gpunvme_streamer_destroy(gpunvme_streamer_t* s) {
  return guard("gpunvme_streamer_destroy", [&] {
    if (!s) return GPUNVME_OK;
    auto held = claim(s, "s");
    // Reads must not land in freed slots: let everything in flight end (bounded) first.
    if (s->use.source().on_gpu()) {
      try {
        s->s->sync();
      } catch (...) {
      }
    }
    for (uint32_t k = 0; k < s->s->slot_count(); ++k) {
      try {
        if (s->s->slot_state(k) == stream::LayerStreamer::SlotState::kLoading && !s->s->ready(k)) s->s->wait(k);
      } catch (...) {
      }
    }
    destroy(s, held);
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_begin(gpunvme_streamer_t* s, uint32_t layer, uint32_t slot) {
  return guard("gpunvme_streamer_begin", [&] {
    auto held = claim(s, "s");
    check_slot(*s, slot);
    s->s->begin(layer, slot);
    s->status[slot] = nullptr;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_ready(gpunvme_streamer_t* s, uint32_t slot, int* ready) {
  return guard("gpunvme_streamer_ready", [&] {
    auto held = claim(s, "s");
    GPUNVME_NEED(ready);
    *ready = 0;
    check_slot(*s, slot);
    if (s->s->slot_state(slot) == stream::LayerStreamer::SlotState::kFree)
      refuse("nothing is loading in slot " + std::to_string(slot) +
             " (never begun, or released); gpunvme_streamer_begin it first");
    *ready = s->s->ready(slot) ? 1 : 0;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_wait(gpunvme_streamer_t* s, uint32_t slot, gpunvme_slot_view_t* view) {
  return guard("gpunvme_streamer_wait", [&] {
    auto held = claim(s, "s");
    check_slot(*s, slot);
    fill_view(s->s->wait(slot), view);
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_piece(gpunvme_streamer_t* s, uint32_t slot, uint32_t index, uint64_t* data_offset,
                                     uint64_t* byte_length) {
  return guard("gpunvme_streamer_piece", [&] {
    auto held = claim(s, "s");
    const stream::SlotView v = held_view(*s, slot);
    const size_t n = v.plan->pieces.size();
    if (index >= n)
      refuse("piece " + std::to_string(index) + " does not exist: layer " + std::to_string(v.layer) + " has " +
           std::to_string(n) + " pieces" + (n ? " (0.." + std::to_string(n - 1) + ")" : std::string()));
    if (data_offset) *data_offset = v.plan->pieces[index].data_offset;
    if (byte_length) *byte_length = v.plan->pieces[index].source.byte_length;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_locate(gpunvme_streamer_t* s, uint32_t slot, uint64_t file_offset, uint64_t* slot_offset) {
  return guard("gpunvme_streamer_locate", [&] {
    auto held = claim(s, "s");
    GPUNVME_NEED(slot_offset);
    if (!s->model_start_lba)
      refuse("this streamer was made from extents, not a model: there are no file offsets to locate");
    const stream::SlotView v = held_view(*s, slot);
    const auto at = v.plan->locate(*s->model_start_lba * s->lba + file_offset, s->lba);
    if (!at)
      return fail(GPUNVME_ERR_NOT_FOUND, "gpunvme_streamer_locate: file byte " + std::to_string(file_offset) +
                                             " is not part of layer " + std::to_string(v.layer));
    *slot_offset = *at;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_release(gpunvme_streamer_t* s, uint32_t slot) {
  return guard("gpunvme_streamer_release", [&] {
    auto held = claim(s, "s");
    check_slot(*s, slot);
    if (s->s->slot_state(slot) == stream::LayerStreamer::SlotState::kFree)
      refuse("slot " + std::to_string(slot) + " is free (never begun, or already released)");
    s->s->release(slot);
    s->status[slot] = nullptr;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_stats(gpunvme_streamer_t* s, gpunvme_stream_stats_t* out) {
  return guard("gpunvme_streamer_stats", [&] {
    auto held = claim(s, "s");
    GPUNVME_NEED(out);
    const auto& st = s->s->stats();
    *out = {};
    out->layers = st.layers;
    out->bytes = st.bytes;
    out->io_seconds = st.io_seconds;
    out->wait_seconds = st.wait_seconds;
    out->elapsed_seconds = st.elapsed_seconds;
    out->last_layer_ms = st.per_layer.empty() ? 0 : st.per_layer.back().io_ms;
    out->prp_bytes = s->s->prp_bytes();
    out->template_bytes = s->s->template_bytes();
    out->slot_bytes = s->s->slot_bytes();
    return GPUNVME_OK;
  });
}

}  // extern "C"
