// Expert fetcher handles: the CPU fetcher behind FetcherImpl, the create helper, and the C calls
// that both kinds of fetcher answer (each written once over FetcherImpl).
#include <cstring>

#include "runtime/capi/capi_internal.h"

using namespace gpunvme;
using namespace gpunvme::capi;

namespace gpunvme::capi {

// ---- FetcherImpl: the calls of the other path refuse ----

namespace {
[[noreturn]] void gpu_fetcher_refuses() {
  throw Error(ErrorKind::kUnsupported, std::string(current_call()) +
                                           ": this is a GPU fetcher (gpunvme_fetcher_create_gpu_from_model); use "
                                           "gpunvme_fetcher_fetch_on / gpunvme_fetcher_wait_gpu (per-expert readiness "
                                           "is the experts' ready words on the GPU)");
}
[[noreturn]] void cpu_fetcher_refuses() {
  throw Error(ErrorKind::kUnsupported, std::string(current_call()) +
                                           ": this fetcher reads through a CPU queue (gpunvme_fetcher_create*); "
                                           "create it with gpunvme_fetcher_create_gpu_from_model for the GPU path");
}
}  // namespace

uint32_t FetcherImpl::fetch(uint32_t, std::span<const uint32_t>) { gpu_fetcher_refuses(); }
bool FetcherImpl::ready(uint32_t) { gpu_fetcher_refuses(); }
void FetcherImpl::wait(uint32_t) { gpu_fetcher_refuses(); }
void FetcherImpl::wait_all() { gpu_fetcher_refuses(); }
void FetcherImpl::fetch_on(uint32_t, const uint32_t*, uint32_t, gpunvme_cuda_stream_t) { cpu_fetcher_refuses(); }
uint32_t FetcherImpl::wait_gpu() { cpu_fetcher_refuses(); }
GpuFetchPointers FetcherImpl::device_pointers() const { cpu_fetcher_refuses(); }

const std::vector<stream::FetchedExpert>& FetcherImpl::described() const {
  if (undescribed_) refuse(undescribed_);
  return latest();
}

// ---- The CPU fetcher ----

namespace {

class CpuFetcher final : public FetcherImpl {
 public:
  CpuFetcher(host::Controller& c, stream::Submitter& sub, stream::ExpertCatalog cat, const stream::FetcherOptions& o)
      : f_(c, sub, std::move(cat), o) {}

  uint32_t fetch(uint32_t layer, std::span<const uint32_t> experts) override {
    undescribed_ = "the latest gpunvme_fetcher_fetch failed; fetch again";
    const uint32_t n = uint32_t(f_.fetch(layer, experts).size());
    undescribed_ = nullptr;
    return n;
  }
  bool ready(uint32_t index) override {
    described();
    return f_.ready(index);
  }
  void wait(uint32_t index) override {
    described();
    f_.wait(index);
  }
  void wait_all() override {
    described();
    f_.wait_all();
  }
  const host::DmaBuffer& scratchpad() const override { return f_.scratchpad(); }
  stream::FetcherMetrics metrics() const override { return f_.metrics(); }
  uint32_t cache_capacity() const override { return f_.cache_capacity(); }
  std::vector<uint32_t> resident_per_layer() const override { return f_.resident_per_layer(); }

 private:
  const std::vector<stream::FetchedExpert>& latest() const override { return f_.result(); }
  stream::ExpertFetcher f_;
};

}  // namespace

std::unique_ptr<FetcherImpl> make_cpu_fetcher(host::Controller& c, stream::Submitter& sub, stream::ExpertCatalog cat,
                                              const stream::FetcherOptions& o) {
  return std::make_unique<CpuFetcher>(c, sub, std::move(cat), o);
}

// ---- Create ----

stream::FetcherOptions fetcher_options(const gpunvme_fetcher_opts_t* o) {
  stream::FetcherOptions fo;
  if (o) {
    if (o->max_experts_per_fetch) fo.max_experts_per_fetch = o->max_experts_per_fetch;
    if (o->nsid) fo.nsid = o->nsid;
    fo.cache_bytes = o->cache_bytes;
    fo.warmup_tokens = o->warmup_tokens;
  }
  return fo;
}

int32_t parts_value(const gpunvme_expert_parts_t& parts) {
  // Copied as bytes: reading an out-of-range value as the C++ enum type would itself be undefined
  // behaviour (C passes any int).
  int32_t raw = 0;
  static_assert(sizeof(parts) == sizeof(raw));
  std::memcpy(&raw, &parts, sizeof raw);
  return raw;
}

stream::ExpertCatalog model_catalog(SubmitterSource& src, const gpunvme_model* model, int32_t parts) {
  live(model, "model");
  if (model->queue->ctrl->ctrl.get() != &src.controller())
    refuse("the model was opened on another controller than the queue(s) given");
  if (parts != GPUNVME_EXPERTS_ALL && parts != GPUNVME_EXPERTS_DOWN_ONLY)
    refuse("parts " + std::to_string(parts) +
           " is not a gpunvme_expert_parts_t (GPUNVME_EXPERTS_ALL 0, GPUNVME_EXPERTS_DOWN_ONLY 1)");
  return stream::ExpertCatalog::from_map(
      *model->map, parts == GPUNVME_EXPERTS_DOWN_ONLY ? stream::ExpertParts::kDownOnly : stream::ExpertParts::kAll);
}

gpunvme_err_t make_fetcher(SubmitterSource& src, stream::ExpertCatalog catalog, const gpunvme_fetcher_opts_t* opts,
                           gpunvme_fetcher_t** out) {
  GPUNVME_NEED(out);
  const stream::FetcherOptions fo = fetcher_options(opts);
  auto f = std::make_unique<gpunvme_fetcher>();
  stream::Submitter& sub = f->use.attach(src, opts && opts->pump_thread);
  f->impl = src.on_gpu() ? make_gpu_fetcher(src.controller(), sub, std::move(catalog), fo)
                         : make_cpu_fetcher(src.controller(), sub, std::move(catalog), fo);
  *out = f.release();
  return GPUNVME_OK;
}

}  // namespace gpunvme::capi

extern "C" {

gpunvme_err_t gpunvme_fetcher_create_from_model(gpunvme_queue_t* queue, gpunvme_model_t* model,
                                                gpunvme_expert_parts_t parts, const gpunvme_fetcher_opts_t* opts,
                                                gpunvme_fetcher_t** out) {
  return guard("gpunvme_fetcher_create_from_model", [&] {
    if (out) *out = nullptr;
    gpunvme_queue& q = live(queue, "queue");
    return make_fetcher(q, model_catalog(q, model, parts_value(parts)), opts, out);
  });
}

gpunvme_err_t gpunvme_fetcher_create(gpunvme_queue_t* queue, const gpunvme_extent_t* parts, uint32_t n_layers,
                                     uint32_t n_experts, uint32_t parts_per_expert, const gpunvme_fetcher_opts_t* opts,
                                     gpunvme_fetcher_t** out) {
  return guard("gpunvme_fetcher_create", [&] {
    if (out) *out = nullptr;
    gpunvme_queue& q = live(queue, "queue");
    GPUNVME_NEED(parts);
    if (parts_per_expert == 0 || parts_per_expert > 3) refuse("parts_per_expert must be 1..3");
    stream::ExpertCatalog c;
    c.n_layers = n_layers;
    c.n_experts = n_experts;
    c.parts.resize(size_t(n_layers) * n_experts);
    for (size_t i = 0; i < c.parts.size(); ++i)
      for (uint32_t k = 0; k < parts_per_expert; ++k) {
        const gpunvme_extent_t& e = parts[i * parts_per_expert + k];
        if (e.lba_count == 0) continue;
        c.parts[i].push_back(stream::ExpertPart{static_cast<model::Projection>(k), to_extent(e)});
      }
    return make_fetcher(q, std::move(c), opts, out);
  });
}

gpunvme_err_t gpunvme_fetcher_destroy(gpunvme_fetcher_t* f) {
  return guard("gpunvme_fetcher_destroy", [&] {
    if (!f) return GPUNVME_OK;
    auto held = claim(f, "f");
    destroy(f, held);  // the fetcher drains its reads in flight, then its queue is detached
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_fetch(gpunvme_fetcher_t* f, uint32_t layer, const uint32_t* experts, uint32_t n,
                                    uint32_t* n_selected) {
  return guard("gpunvme_fetcher_fetch", [&] {
    if (n_selected) *n_selected = 0;
    auto held = claim(f, "f");
    if (n > 0) GPUNVME_NEED(experts);
    const uint32_t selected = f->impl->fetch(layer, std::span<const uint32_t>(experts, n));
    if (n_selected) *n_selected = selected;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_ready(gpunvme_fetcher_t* f, uint32_t index, int* ready) {
  return guard("gpunvme_fetcher_ready", [&] {
    auto held = claim(f, "f");
    GPUNVME_NEED(ready);
    *ready = 0;
    *ready = f->impl->ready(index) ? 1 : 0;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_wait(gpunvme_fetcher_t* f, uint32_t index) {
  return guard("gpunvme_fetcher_wait", [&] {
    auto held = claim(f, "f");
    f->impl->wait(index);
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_wait_all(gpunvme_fetcher_t* f) {
  return guard("gpunvme_fetcher_wait_all", [&] {
    auto held = claim(f, "f");
    f->impl->wait_all();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_expert(gpunvme_fetcher_t* f, uint32_t index, gpunvme_fetched_expert_t* out) {
  return guard("gpunvme_fetcher_expert", [&] {
    auto held = claim(f, "f");
    GPUNVME_NEED(out);
    const auto& r = f->impl->described();
    if (index >= r.size()) refuse("the last fetch selected " + std::to_string(r.size()) + " experts");
    *out = {};
    out->expert = r[index].expert;
    out->hit = r[index].hit ? 1 : 0;
    out->offset = r[index].offset;
    out->bytes = r[index].bytes;
    out->n_parts = uint32_t(r[index].parts.size());
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_part(gpunvme_fetcher_t* f, uint32_t index, uint32_t part, gpunvme_projection_t* proj,
                                   uint64_t* offset, uint64_t* bytes) {
  return guard("gpunvme_fetcher_part", [&] {
    auto held = claim(f, "f");
    const auto& r = f->impl->described();
    if (index >= r.size() || part >= r[index].parts.size())
      refuse("no part " + std::to_string(part) + " of selection " + std::to_string(index));
    const auto& p = r[index].parts[part];
    if (proj) *proj = static_cast<gpunvme_projection_t>(p.proj);
    if (offset) *offset = p.offset;
    if (bytes) *bytes = p.bytes;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_scratchpad(gpunvme_fetcher_t* f, const void** host, const void** device, uint64_t* bytes) {
  return guard("gpunvme_fetcher_scratchpad", [&] {
    auto held = claim(f, "f");
    const host::DmaBuffer& sp = f->impl->scratchpad();
    if (host) *host = sp.host();
    if (device) *device = sp.device();
    if (bytes) *bytes = sp.size();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_metrics(gpunvme_fetcher_t* f, gpunvme_fetch_metrics_t* out) {
  return guard("gpunvme_fetcher_metrics", [&] {
    auto held = claim(f, "f");
    GPUNVME_NEED(out);
    const stream::FetcherMetrics m = f->impl->metrics();
    *out = {};
    out->tokens = m.tokens;
    out->requested = m.requested;
    out->faults = m.faults;
    out->hits = m.hits;
    out->bytes_read = m.bytes_read;
    out->steady_tokens = m.steady_tokens;
    out->steady_faults = m.steady_faults;
    out->last_faults = m.last_faults;
    out->cache_capacity = f->impl->cache_capacity();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_resident(gpunvme_fetcher_t* f, uint32_t* counts, uint32_t n) {
  return guard("gpunvme_fetcher_resident", [&] {
    auto held = claim(f, "f");
    if (n > 0) GPUNVME_NEED(counts);
    const auto r = f->impl->resident_per_layer();
    for (uint32_t i = 0; i < n; ++i) counts[i] = i < r.size() ? r[i] : 0;
    return GPUNVME_OK;
  });
}

}  // extern "C"
