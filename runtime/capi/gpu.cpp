// The GPU path's C calls: availability, GPU queue sets, GPU-ordered streaming and GPU expert
// fetches. The CUDA-only pieces are behind make_gpu_submitter / make_gpu_fetcher (gpu_cuda.cpp,
// or stubs_nocuda.cpp without CUDA); every call here first refuses when the GPU path is unavailable.
#include <cstddef>
#include <optional>
#include <type_traits>

#include "host/cuda_device.h"
#include "runtime/capi/capi_internal.h"
#include "runtime/stream/cuda_stream.h"
#include "runtime/stream/gpu_fetch_types.h"

using namespace gpunvme;
using namespace gpunvme::capi;

// The C mirrors of the structs the GPU fetcher leaves in device memory (gpu_fetch_types.h).
static_assert(std::is_same_v<gpunvme_cuda_stream_t, stream::cuda_stream_t>);
static_assert(std::is_standard_layout_v<stream::GpuFetchResult> && std::is_standard_layout_v<stream::GpuFetchedExpert>);
static_assert(sizeof(gpunvme_gpu_fetch_result_t) == sizeof(stream::GpuFetchResult));
static_assert(alignof(gpunvme_gpu_fetch_result_t) == alignof(stream::GpuFetchResult));
static_assert(offsetof(gpunvme_gpu_fetch_result_t, token) == offsetof(stream::GpuFetchResult, token));
static_assert(offsetof(gpunvme_gpu_fetch_result_t, count) == offsetof(stream::GpuFetchResult, count));
static_assert(offsetof(gpunvme_gpu_fetch_result_t, error) == offsetof(stream::GpuFetchResult, error));
static_assert(offsetof(gpunvme_gpu_fetch_result_t, error_value) == offsetof(stream::GpuFetchResult, error_value));
static_assert(offsetof(gpunvme_gpu_fetch_result_t, commands) == offsetof(stream::GpuFetchResult, commands));
static_assert(offsetof(gpunvme_gpu_fetch_result_t, layer) == offsetof(stream::GpuFetchResult, layer));
static_assert(sizeof(gpunvme_gpu_fetch_result_t) == 24);
static_assert(GPUNVME_MAX_EXPERT_PARTS == stream::kMaxExpertParts);
static_assert(sizeof(gpunvme_gpu_fetched_expert_t) == sizeof(stream::GpuFetchedExpert));
static_assert(sizeof(gpunvme_gpu_fetched_expert_t) == 120);
static_assert(alignof(gpunvme_gpu_fetched_expert_t) == alignof(stream::GpuFetchedExpert));
#define GPUNVME_SAME_FIELD(f) \
  static_assert(offsetof(gpunvme_gpu_fetched_expert_t, f) == offsetof(stream::GpuFetchedExpert, f), #f)
GPUNVME_SAME_FIELD(expert);
GPUNVME_SAME_FIELD(hit);
GPUNVME_SAME_FIELD(offset);
GPUNVME_SAME_FIELD(bytes);
GPUNVME_SAME_FIELD(ready);
GPUNVME_SAME_FIELD(failed);
GPUNVME_SAME_FIELD(part_count);
GPUNVME_SAME_FIELD(part_proj);
GPUNVME_SAME_FIELD(part_offset);
GPUNVME_SAME_FIELD(part_bytes);
GPUNVME_SAME_FIELD(pending);
#undef GPUNVME_SAME_FIELD
static_assert(sizeof(stream::GpuFetchedExpert::part_proj) == sizeof(gpunvme_gpu_fetched_expert_t::part_proj));
static_assert(sizeof(stream::GpuFetchedExpert::part_offset) == sizeof(gpunvme_gpu_fetched_expert_t::part_offset));
static_assert(sizeof(stream::GpuFetchedExpert::part_bytes) == sizeof(gpunvme_gpu_fetched_expert_t::part_bytes));
static_assert(GPUNVME_FETCH_ERROR_NONE == stream::fetch_error::kNone);
static_assert(GPUNVME_FETCH_ERROR_BAD_EXPERT_ID == stream::fetch_error::kBadExpertId);
static_assert(GPUNVME_FETCH_ERROR_TOO_MANY == stream::fetch_error::kTooMany);
static_assert(GPUNVME_FETCH_ERROR_NO_SLICES == stream::fetch_error::kNoSlices);
static_assert(GPUNVME_PROJ_GATE == int(model::Projection::kGate) && GPUNVME_PROJ_UP == int(model::Projection::kUp) &&
              GPUNVME_PROJ_DOWN == int(model::Projection::kDown));

namespace gpunvme::capi {

const std::string* gpu_unavailable() {
  static const std::optional<std::string> why = []() -> std::optional<std::string> {
    std::string w;
    if (host::cuda_device_available(&w)) return std::nullopt;
    return w.empty() ? std::string("no usable CUDA GPU") : w;
  }();
  return why ? &*why : nullptr;
}

void need_gpu() {
  if (const std::string* why = gpu_unavailable())
    throw Error(ErrorKind::kUnsupported, std::string(current_call()) + ": the GPU path is unavailable: " + *why);
}

}  // namespace gpunvme::capi

stream::Submitter& gpunvme_gpu_queues::attach(bool) {
  std::lock_guard<std::mutex> lock(in_use);
  ++users;
  return *sub;
}

void gpunvme_gpu_queues::detach() noexcept {
  std::lock_guard<std::mutex> lock(in_use);
  --users;
}

namespace {

// The start of the GPU-path creates: *out = NULL, the GPU path available, gq live.
template <class Out>
gpunvme_gpu_queues& gpu_create_source(gpunvme_gpu_queues* gq, Out** out) {
  if (out) *out = nullptr;
  need_gpu();
  return live(gq, "gq");
}

// Deletes queue pairs of a GPU queue set (after its submitter went); the first failure is rethrown.
void delete_queue_pairs(gpunvme_ctrl& ctrl, std::vector<std::unique_ptr<host::QueuePair>>& qps) {
  std::exception_ptr first;
  for (auto& qp : qps) {
    --ctrl.queues;
    try {
      ctrl.ctrl->delete_io_queue_pair(*qp);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  qps.clear();
  if (first) std::rethrow_exception(first);
}

}  // namespace

extern "C" {

gpunvme_err_t gpunvme_gpu_available(void) {
  return guard("gpunvme_gpu_available", [&] {
    need_gpu();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_gpu_queues_create(gpunvme_ctrl_t* ctrl, uint16_t first_qid, uint32_t count, uint32_t entries,
                                        gpunvme_gpu_queues_t** out) {
  return guard("gpunvme_gpu_queues_create", [&] {
    if (out) *out = nullptr;
    need_gpu();
    host::Controller& c = *live(ctrl, "ctrl").ctrl;
    GPUNVME_NEED(out);
    if (count == 0) refuse("count must be at least 1");
    if (first_qid == 0 || uint64_t(first_qid) + count - 1 > c.io_queues_granted())
      refuse("qids " + std::to_string(first_qid) + ".." + std::to_string(uint64_t(first_qid) + count - 1) +
             " are not all I/O queues the controller granted (1.." + std::to_string(c.io_queues_granted()) + ")");
    auto gq = std::make_unique<gpunvme_gpu_queues>();
    gq->ctrl = ctrl;
    host::DmaOptions mem;
    mem.gpu_mapped = true;
    try {
      for (uint32_t i = 0; i < count; ++i) {
        gq->qps.push_back(c.create_io_queue_pair(uint16_t(first_qid + i), entries, mem));
        ++ctrl->queues;
      }
      std::vector<host::QueuePair*> raw;
      for (auto& qp : gq->qps) raw.push_back(qp.get());
      gq->sub = make_gpu_submitter(c, std::move(raw), gq->nsid);
    } catch (...) {
      gq->sub.reset();
      try {
        delete_queue_pairs(*ctrl, gq->qps);
      } catch (...) {
      }
      throw;
    }
    *out = gq.release();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_gpu_queues_destroy(gpunvme_gpu_queues_t* gq) {
  return guard("gpunvme_gpu_queues_destroy", [&] {
    if (!gq) return GPUNVME_OK;
    auto held = claim(gq, "gq");
    gq->check_unused("these GPU queues");
    gq->sub.reset();  // waits (bounded) for kernels still running
    gpunvme_ctrl& ctrl = *gq->ctrl;
    std::vector<std::unique_ptr<host::QueuePair>> qps = std::move(gq->qps);
    destroy(gq, held);
    delete_queue_pairs(ctrl, qps);
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_create_gpu(gpunvme_gpu_queues_t* gq, const gpunvme_extent_t* extents,
                                          const uint32_t* layer_first, uint32_t n_layers,
                                          const gpunvme_streamer_opts_t* opts, gpunvme_streamer_t** out) {
  return guard("gpunvme_streamer_create_gpu", [&] {
    gpunvme_gpu_queues& g = gpu_create_source(gq, out);
    return make_streamer(g, extent_layers(extents, layer_first, n_layers), opts, nullptr, out);
  });
}

gpunvme_err_t gpunvme_streamer_create_gpu_from_model(gpunvme_gpu_queues_t* gq, gpunvme_model_t* model,
                                                     int skip_experts, const gpunvme_streamer_opts_t* opts,
                                                     gpunvme_streamer_t** out) {
  return guard("gpunvme_streamer_create_gpu_from_model", [&] {
    gpunvme_gpu_queues& g = gpu_create_source(gq, out);
    return make_streamer(g, model_layers(g, model, skip_experts), opts, model, out);
  });
}

gpunvme_err_t gpunvme_streamer_begin_on(gpunvme_streamer_t* s, uint32_t layer, uint32_t slot,
                                        gpunvme_cuda_stream_t io) {
  return guard("gpunvme_streamer_begin_on", [&] {
    need_gpu();
    auto held = claim(s, "s");
    check_slot(*s, slot);
    s->s->begin(layer, slot, io);
    s->status[slot] = nullptr;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_wait_on(gpunvme_streamer_t* s, uint32_t slot, gpunvme_cuda_stream_t compute,
                                       gpunvme_slot_view_t* view) {
  return guard("gpunvme_streamer_wait_on", [&] {
    need_gpu();
    auto held = claim(s, "s");
    check_slot(*s, slot);
    const stream::SlotView v = s->s->wait(slot, compute);
    s->status[slot] = v.status;
    fill_view(v, view);
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_status(gpunvme_streamer_t* s, uint32_t slot, const uint32_t** status) {
  return guard("gpunvme_streamer_status", [&] {
    need_gpu();
    auto held = claim(s, "s");
    GPUNVME_NEED(status);
    check_slot(*s, slot);
    *status = s->status[slot];
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_release_on(gpunvme_streamer_t* s, uint32_t slot, gpunvme_cuda_stream_t compute) {
  return guard("gpunvme_streamer_release_on", [&] {
    need_gpu();
    auto held = claim(s, "s");
    check_slot(*s, slot);
    if (s->s->slot_state(slot) == stream::LayerStreamer::SlotState::kFree)
      refuse("slot " + std::to_string(slot) + " is free (never begun, or already released)");
    s->s->release(slot, compute);
    s->status[slot] = nullptr;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_sync(gpunvme_streamer_t* s) {
  return guard("gpunvme_streamer_sync", [&] {
    need_gpu();
    auto held = claim(s, "s");
    s->s->sync();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_create_gpu_from_model(gpunvme_gpu_queues_t* gq, gpunvme_model_t* model,
                                                    gpunvme_expert_parts_t parts, const gpunvme_fetcher_opts_t* opts,
                                                    gpunvme_fetcher_t** out) {
  return guard("gpunvme_fetcher_create_gpu_from_model", [&] {
    gpunvme_gpu_queues& g = gpu_create_source(gq, out);
    const uint32_t nsid = fetcher_options(opts).nsid;
    if (nsid != g.nsid)
      refuse("opts->nsid " + std::to_string(nsid) + ": the GPU queues read namespace " + std::to_string(g.nsid));
    return make_fetcher(g, model_catalog(g, model, parts_value(parts)), opts, out);
  });
}

gpunvme_err_t gpunvme_fetcher_fetch_on(gpunvme_fetcher_t* f, uint32_t layer, const uint32_t* device_ids, uint32_t n,
                                       gpunvme_cuda_stream_t stream) {
  return guard("gpunvme_fetcher_fetch_on", [&] {
    need_gpu();
    auto held = claim(f, "f");
    if (n > 0) GPUNVME_NEED(device_ids);
    f->impl->fetch_on(layer, device_ids, n, stream);
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_wait_gpu(gpunvme_fetcher_t* f, uint32_t* n_selected) {
  return guard("gpunvme_fetcher_wait_gpu", [&] {
    if (n_selected) *n_selected = 0;
    need_gpu();
    auto held = claim(f, "f");
    const uint32_t n = f->impl->wait_gpu();
    if (n_selected) *n_selected = n;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_device_result(gpunvme_fetcher_t* f, const gpunvme_gpu_fetch_result_t** result,
                                            const gpunvme_gpu_fetched_expert_t** experts,
                                            const uint32_t** selection) {
  return guard("gpunvme_fetcher_device_result", [&] {
    need_gpu();
    auto held = claim(f, "f");
    const GpuFetchPointers p = f->impl->device_pointers();
    if (result) *result = static_cast<const gpunvme_gpu_fetch_result_t*>(p.result);
    if (experts) *experts = static_cast<const gpunvme_gpu_fetched_expert_t*>(p.experts);
    if (selection) *selection = p.selection;
    return GPUNVME_OK;
  });
}

}  // extern "C"
