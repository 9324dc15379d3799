// The C API over the C++ library: every entry point catches everything and turns it into a
// gpunvme_err_t plus a per-thread message.
#include "runtime/capi/gpunvme.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "host/cpu_io.h"
#include "host/error.h"
#include "host/open_device.h"
#include "runtime/gguf/gguf_error.h"
#include "runtime/model/detect.h"
#include "runtime/model/lba_map.h"
#include "runtime/model/model_error.h"
#include "runtime/plan/command_plan.h"
#include "runtime/stream/cpu_submitter.h"
#include "runtime/stream/cuda_stream.h"
#include "runtime/stream/expert_fetcher.h"
#include "runtime/stream/gpu_fetch_types.h"
#include "runtime/stream/layer_streamer.h"

#if GPUNVME_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "runtime/stream/gpu_expert_fetcher.h"
#include "runtime/stream/gpu_submitter.h"
#endif

using namespace gpunvme;

// ---- The GPU path's types: the real ones in CUDA builds, stand-ins that are never constructed
// (every GPU entry point checks gpu_unavailable() first) so the code below is the same in both.
namespace capi_gpu {
#if GPUNVME_HAVE_CUDA
using GpuSubmitter = stream::GpuSubmitter;
using GpuExpertFetcher = stream::GpuExpertFetcher;
static_assert(std::is_same_v<gpunvme_cuda_stream_t, cudaStream_t>);
#else
[[noreturn]] inline void no_cuda() {
  throw Error(ErrorKind::kUnsupported, "gpunvme was built without CUDA (meson option -Dcuda=enabled needs nvcc)");
}
class GpuSubmitter final : public stream::Submitter {
 public:
  GpuSubmitter(host::Controller&, std::vector<host::QueuePair*>, uint32_t) { no_cuda(); }
  uint64_t issue(std::span<const nvme::SubmissionEntry>) override { no_cuda(); }
  void progress() override {}
  bool done(uint64_t) override { no_cuda(); }
  void wait(uint64_t) override { no_cuda(); }
};
class GpuExpertFetcher {
 public:
  GpuExpertFetcher(host::Controller&, GpuSubmitter&, stream::ExpertCatalog, const stream::FetcherOptions&) { no_cuda(); }
  void fetch(uint32_t, const uint32_t*, uint32_t, stream::cuda_stream_t) { no_cuda(); }
  std::vector<stream::FetchedExpert> wait() { no_cuda(); }
  const stream::GpuFetchResult* device_result() const { return nullptr; }
  const stream::GpuFetchedExpert* device_experts() const { return nullptr; }
  const uint32_t* device_selection() const { return nullptr; }
  const host::DmaBuffer& scratchpad() const { no_cuda(); }
  uint32_t cache_capacity() const { return 0; }
  stream::FetcherMetrics metrics() const { no_cuda(); }
  std::vector<uint32_t> resident_per_layer() const { no_cuda(); }
};
#endif
}  // namespace capi_gpu

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
#undef GPUNVME_SAME_FIELD
static_assert(offsetof(gpunvme_gpu_fetched_expert_t, reserved) + sizeof(uint32_t) ==
              offsetof(stream::GpuFetchedExpert, part_offset));  // the C++ struct's implicit padding
static_assert(sizeof(stream::GpuFetchedExpert::part_proj) == sizeof(gpunvme_gpu_fetched_expert_t::part_proj));
static_assert(sizeof(stream::GpuFetchedExpert::part_offset) == sizeof(gpunvme_gpu_fetched_expert_t::part_offset));
static_assert(sizeof(stream::GpuFetchedExpert::part_bytes) == sizeof(gpunvme_gpu_fetched_expert_t::part_bytes));
static_assert(GPUNVME_FETCH_ERROR_NONE == stream::fetch_error::kNone);
static_assert(GPUNVME_FETCH_ERROR_BAD_EXPERT_ID == stream::fetch_error::kBadExpertId);
static_assert(GPUNVME_FETCH_ERROR_TOO_MANY == stream::fetch_error::kTooMany);
static_assert(GPUNVME_FETCH_ERROR_NO_SLICES == stream::fetch_error::kNoSlices);
static_assert(GPUNVME_PROJ_GATE == int(model::Projection::kGate) && GPUNVME_PROJ_UP == int(model::Projection::kUp) &&
              GPUNVME_PROJ_DOWN == int(model::Projection::kDown));

struct gpunvme_ctrl {
  std::unique_ptr<host::Controller> ctrl;
  uint32_t queues = 0;  // I/O queues not yet deleted
};

struct gpunvme_queue {
  gpunvme_ctrl* ctrl = nullptr;
  std::unique_ptr<host::QueuePair> qp;
  std::unique_ptr<stream::CpuSubmitter> sub;  // made on first use by a streamer/fetcher
  bool pump = false;
  stream::CpuSubmitter& submitter(bool want_pump) {
    // One submitter per queue, made by the first streamer/fetcher (its pump choice wins).
    if (!sub) {
      sub = std::make_unique<stream::CpuSubmitter>(*ctrl->ctrl, *qp, stream::CpuSubmitterOptions{.pump_thread = want_pump});
      pump = want_pump;
    }
    return *sub;
  }
  uint32_t users = 0;  // streamers/fetchers using the submitter
};

struct gpunvme_model {
  gpunvme_queue* queue = nullptr;
  model::DetectedModel detected;
  std::unique_ptr<gguf::GgufFile> file;
  std::unique_ptr<model::LbaMap> map;
};

// Queue pairs handed to GPU kernels, and the GPU submitter over them.
struct gpunvme_gpu_queues {
  gpunvme_ctrl* ctrl = nullptr;
  std::vector<std::unique_ptr<host::QueuePair>> qps;
  std::unique_ptr<capi_gpu::GpuSubmitter> sub;
  uint32_t nsid = 1;   // of the kernels' own reads (DeviceQueueSet)
  uint32_t users = 0;  // streamers/fetchers using the submitter
};

struct gpunvme_streamer {
  gpunvme_queue* queue = nullptr;     // CPU streamers
  gpunvme_gpu_queues* gq = nullptr;   // GPU streamers
  std::unique_ptr<stream::LayerStreamer> s;
  std::vector<const uint32_t*> status;  // per slot: the state word of a held GPU-ordered load
  uint32_t lba = 0;
  uint64_t model_start_lba = 0;
  bool from_model = false;
};

struct gpunvme_fetcher {
  gpunvme_queue* queue = nullptr;     // CPU fetchers
  std::unique_ptr<stream::ExpertFetcher> f;
  gpunvme_gpu_queues* gq = nullptr;   // GPU fetchers
  std::unique_ptr<capi_gpu::GpuExpertFetcher> g;
  std::vector<stream::FetchedExpert> gpu_result;  // of the latest fetch_on, once wait_gpu returned
  bool gpu_pending = false;                       // a fetch_on not yet waited for
};

namespace {

thread_local std::string g_message;

gpunvme_err_t fail(gpunvme_err_t e, const std::string& msg) {
  g_message = msg;
  return e;
}

gpunvme_err_t from_kind(ErrorKind k) {
  switch (k) {
    case ErrorKind::kInvalidArgument: return GPUNVME_ERR_INVALID_ARGUMENT;
    case ErrorKind::kNotFound: return GPUNVME_ERR_NOT_FOUND;
    case ErrorKind::kPermission: return GPUNVME_ERR_PERMISSION;
    case ErrorKind::kResource: return GPUNVME_ERR_RESOURCE;
    case ErrorKind::kTimeout: return GPUNVME_ERR_TIMEOUT;
    case ErrorKind::kControllerFatal: return GPUNVME_ERR_CONTROLLER_FATAL;
    case ErrorKind::kCommandFailed: return GPUNVME_ERR_COMMAND_FAILED;
    case ErrorKind::kProtocol: return GPUNVME_ERR_PROTOCOL;
    case ErrorKind::kUnsupported: return GPUNVME_ERR_UNSUPPORTED;
    case ErrorKind::kIo: return GPUNVME_ERR_IO;
  }
  return GPUNVME_ERR_INTERNAL;
}

template <class F>
gpunvme_err_t guard(F&& f) {
  try {
    g_message.clear();
    return f();
  } catch (const Error& e) {
    return fail(from_kind(e.kind()), e.what());
  } catch (const model::ModelError& e) {
    return fail(GPUNVME_ERR_MODEL, e.what());
  } catch (const gguf::GgufError& e) {
    return fail(GPUNVME_ERR_MODEL, e.what());
  } catch (const std::bad_alloc&) {
    return fail(GPUNVME_ERR_RESOURCE, "out of host memory");
  } catch (const std::exception& e) {
    return fail(GPUNVME_ERR_INTERNAL, e.what());
  } catch (...) {
    return fail(GPUNVME_ERR_INTERNAL, "unknown exception");
  }
}

#define GPUNVME_NEED(p)                                                                     \
  do {                                                                                      \
    if (!(p)) return fail(GPUNVME_ERR_INVALID_ARGUMENT, "gpunvme: argument '" #p "' is NULL");     \
  } while (0)

model::Extent to_extent(const gpunvme_extent_t& e) {
  model::Extent x;
  x.first_lba = e.first_lba;
  x.lba_count = e.lba_count;
  x.byte_in_first = e.byte_in_first;
  x.byte_length = e.byte_length;
  return x;
}
gpunvme_extent_t from_extent(const model::Extent& x) {
  gpunvme_extent_t e{};
  e.first_lba = x.first_lba;
  e.lba_count = x.lba_count;
  e.byte_in_first = x.byte_in_first;
  e.byte_length = x.byte_length;
  return e;
}

void transfer(gpunvme_queue* q, uint32_t nsid, uint64_t slba, uint64_t nblocks, void* buf, bool write) {
  host::Controller& c = *q->ctrl->ctrl;
  host::CpuIo io(c, *q->qp, nsid);
  const uint64_t lba = io.lba_bytes();
  const uint64_t chunk_blocks = std::max<uint64_t>(1, (4ull << 20) / lba);
  host::DmaBuffer bounce(c.transport(), chunk_blocks * lba);
  for (uint64_t done = 0; done < nblocks;) {
    const uint64_t n = std::min(chunk_blocks, nblocks - done);
    uint8_t* p = static_cast<uint8_t*>(buf) + done * lba;
    if (write) {
      std::memcpy(bounce.host(), p, n * lba);
      io.write(slba + done, n, bounce, 0);
    } else {
      io.read(slba + done, n, bounce, 0);
      std::memcpy(p, bounce.host(), n * lba);
    }
    done += n;
  }
}

model::BlockIo block_io(gpunvme_queue* q, uint32_t nsid) {
  const auto& ns = q->ctrl->ctrl->namespace_info(nsid);
  model::BlockIo io;
  io.lba_size = ns.lba_bytes;
  io.n_lbas = ns.blocks;
  io.name = q->ctrl->ctrl->transport().name();
  io.read = [q, nsid](uint64_t lba, uint32_t count, void* dst) { transfer(q, nsid, lba, count, dst, false); };
  io.write = [q, nsid](uint64_t lba, uint32_t count, const void* src) {
    transfer(q, nsid, lba, count, const_cast<void*>(src), true);
  };
  return io;
}

stream::StreamerOptions streamer_options(const gpunvme_streamer_opts_t* o) {
  stream::StreamerOptions so;
  if (o) {
    if (o->slots) so.slots = o->slots;
    if (o->nsid) so.nsid = o->nsid;
    so.max_command_bytes = o->max_command_bytes;
  }
  return so;
}

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

// Why the GPU path cannot be used in this process (asked once), or nullptr when it can.
const std::string* gpu_unavailable() {
  static const std::optional<std::string> why = []() -> std::optional<std::string> {
    std::string w;
    if (host::cuda_device_available(&w)) return std::nullopt;
    return w.empty() ? std::string("no usable CUDA GPU") : w;
  }();
  return why ? &*why : nullptr;
}

#define GPUNVME_NEED_GPU(fn)                                                                             \
  do {                                                                                                  \
    if (const std::string* why_ = gpu_unavailable())                                                    \
      return fail(GPUNVME_ERR_UNSUPPORTED, std::string(fn) + ": the GPU path is unavailable: " + *why_); \
  } while (0)

std::vector<std::vector<model::Extent>> extent_layers(const gpunvme_extent_t* extents, const uint32_t* layer_first,
                                                      uint32_t n_layers, const char* fn) {
  std::vector<std::vector<model::Extent>> layers(n_layers);
  for (uint32_t l = 0; l < n_layers; ++l) {
    if (layer_first[l + 1] < layer_first[l])
      throw Error(ErrorKind::kInvalidArgument,
                  std::string(fn) + ": layer_first is not ascending at layer " + std::to_string(l));
    for (uint32_t i = layer_first[l]; i < layer_first[l + 1]; ++i) layers[l].push_back(to_extent(extents[i]));
  }
  return layers;
}

gpunvme_err_t make_gpu_streamer(gpunvme_gpu_queues* gq, std::vector<std::vector<model::Extent>> layers,
                                const gpunvme_streamer_opts_t* opts, gpunvme_model* model, gpunvme_streamer_t** out) {
  auto s = std::make_unique<gpunvme_streamer>();
  s->gq = gq;
  s->s = std::make_unique<stream::LayerStreamer>(*gq->ctrl->ctrl, *gq->sub, std::move(layers), streamer_options(opts));
  s->lba = s->s->lba_bytes();
  s->status.assign(s->s->slot_count(), nullptr);
  if (model) {
    s->model_start_lba = model->detected.start_lba;
    s->from_model = true;
  }
  ++gq->users;
  *out = s.release();
  return GPUNVME_OK;
}

// The fetched experts the expert/part calls describe: the CPU fetcher's result, or the GPU
// fetcher's latest waited-for one.
const std::vector<stream::FetchedExpert>& fetched(gpunvme_fetcher* f, const char* fn) {
  if (!f->g) return f->f->result();
  if (f->gpu_pending)
    throw Error(ErrorKind::kInvalidArgument, std::string(fn) + ": the latest gpunvme_fetcher_fetch_on was not waited "
                                                               "for; call gpunvme_fetcher_wait_gpu first");
  return f->gpu_result;
}

gpunvme_err_t gpu_fetcher_refuses(const char* fn) {
  return fail(GPUNVME_ERR_UNSUPPORTED, std::string(fn) +
                                           ": this is a GPU fetcher (gpunvme_fetcher_create_gpu_from_model); use "
                                           "gpunvme_fetcher_fetch_on / gpunvme_fetcher_wait_gpu (per-expert readiness "
                                           "is the experts' ready words on the GPU)");
}

gpunvme_err_t cpu_fetcher_refuses(const char* fn) {
  return fail(GPUNVME_ERR_UNSUPPORTED, std::string(fn) +
                                           ": this fetcher reads through a CPU queue (gpunvme_fetcher_create*); "
                                           "create it with gpunvme_fetcher_create_gpu_from_model for the GPU path");
}

}  // namespace

extern "C" {

const char* gpunvme_strerror(gpunvme_err_t err) {
  switch (err) {
    case GPUNVME_OK: return "success";
    case GPUNVME_ERR_INVALID_ARGUMENT: return "invalid argument";
    case GPUNVME_ERR_NOT_FOUND: return "not found";
    case GPUNVME_ERR_PERMISSION: return "permission denied";
    case GPUNVME_ERR_RESOURCE: return "out of resources";
    case GPUNVME_ERR_TIMEOUT: return "timed out";
    case GPUNVME_ERR_CONTROLLER_FATAL: return "controller fatal status";
    case GPUNVME_ERR_COMMAND_FAILED: return "command failed";
    case GPUNVME_ERR_PROTOCOL: return "controller protocol violation";
    case GPUNVME_ERR_UNSUPPORTED: return "unsupported";
    case GPUNVME_ERR_IO: return "host I/O error";
    case GPUNVME_ERR_MODEL: return "model error";
    case GPUNVME_ERR_INTERNAL: return "internal error";
  }
  return "unknown error code";
}

const char* gpunvme_last_error_message(void) { return g_message.c_str(); }

gpunvme_err_t gpunvme_ctrl_init(gpunvme_ctrl_t** out, const char* device) {
  return guard([&] {
    GPUNVME_NEED(out);
    GPUNVME_NEED(device);
    *out = nullptr;
    auto c = std::make_unique<gpunvme_ctrl>();
    c->ctrl = host::open_controller(device);
    *out = c.release();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_ctrl_shutdown(gpunvme_ctrl_t* ctrl) {
  return guard([&] {
    if (!ctrl) return GPUNVME_OK;
    if (ctrl->queues > 0)
      return fail(GPUNVME_ERR_INVALID_ARGUMENT, "gpunvme_ctrl_shutdown: " + std::to_string(ctrl->queues) +
                                                    " I/O queues are still open; gpunvme_delete_io_queue / "
                                                    "gpunvme_gpu_queues_destroy them first");
    std::unique_ptr<gpunvme_ctrl> owned(ctrl);
    owned->ctrl->shutdown();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_ctrl_info(gpunvme_ctrl_t* ctrl, gpunvme_ctrl_info_t* out) {
  return guard([&] {
    GPUNVME_NEED(ctrl);
    GPUNVME_NEED(out);
    *out = {};
    out->io_queues = ctrl->ctrl->io_queues_granted();
    out->max_queue_entries = ctrl->ctrl->max_queue_entries();
    out->page_bytes = ctrl->ctrl->page_bytes();
    out->max_transfer_bytes = ctrl->ctrl->max_transfer_bytes();
    out->namespaces = uint32_t(ctrl->ctrl->namespaces().size());
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_ns_info(gpunvme_ctrl_t* ctrl, uint32_t nsid, uint64_t* blocks, uint32_t* lba_bytes) {
  return guard([&] {
    GPUNVME_NEED(ctrl);
    const auto& ns = ctrl->ctrl->namespace_info(nsid);
    if (blocks) *blocks = ns.blocks;
    if (lba_bytes) *lba_bytes = ns.lba_bytes;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_create_io_queue(gpunvme_ctrl_t* ctrl, uint16_t qid, uint32_t entries, gpunvme_queue_t** out) {
  return guard([&] {
    GPUNVME_NEED(ctrl);
    GPUNVME_NEED(out);
    *out = nullptr;
    auto q = std::make_unique<gpunvme_queue>();
    q->ctrl = ctrl;
    q->qp = ctrl->ctrl->create_io_queue_pair(qid, entries);
    ++ctrl->queues;
    *out = q.release();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_delete_io_queue(gpunvme_queue_t* queue) {
  return guard([&] {
    if (!queue) return GPUNVME_OK;
    if (queue->users > 0)
      return fail(GPUNVME_ERR_INVALID_ARGUMENT, "gpunvme_delete_io_queue: " + std::to_string(queue->users) +
                                                    " streamers/fetchers still use this queue; destroy them first");
    std::unique_ptr<gpunvme_queue> owned(queue);
    owned->sub.reset();
    --owned->ctrl->queues;
    owned->ctrl->ctrl->delete_io_queue_pair(*owned->qp);
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_write(gpunvme_queue_t* queue, uint32_t nsid, uint64_t slba, uint64_t nblocks, const void* src) {
  return guard([&] {
    GPUNVME_NEED(queue);
    GPUNVME_NEED(src);
    if (queue->sub && (queue->pump || queue->qp->in_flight() > 0))
      return fail(GPUNVME_ERR_INVALID_ARGUMENT, "gpunvme_write: a streamer/fetcher drives this queue (reads in flight or a "
                                                "pump thread); use another queue for set-up I/O");
    transfer(queue, nsid, slba, nblocks, const_cast<void*>(src), true);
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_read(gpunvme_queue_t* queue, uint32_t nsid, uint64_t slba, uint64_t nblocks, void* dst) {
  return guard([&] {
    GPUNVME_NEED(queue);
    GPUNVME_NEED(dst);
    if (queue->sub && (queue->pump || queue->qp->in_flight() > 0))
      return fail(GPUNVME_ERR_INVALID_ARGUMENT, "gpunvme_read: a streamer/fetcher drives this queue (reads in flight or a "
                                                "pump thread); use another queue for set-up I/O");
    transfer(queue, nsid, slba, nblocks, dst, false);
    return GPUNVME_OK;
  });
}

// ---- model ----

gpunvme_err_t gpunvme_model_open(gpunvme_queue_t* queue, uint32_t nsid, int64_t start_lba_hint, gpunvme_model_t** out) {
  return guard([&] {
    GPUNVME_NEED(queue);
    GPUNVME_NEED(out);
    *out = nullptr;
    auto m = std::make_unique<gpunvme_model>();
    m->queue = queue;
    const model::BlockIo io = block_io(queue, nsid == 0 ? 1 : nsid);
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
  delete model;
  return GPUNVME_OK;
}

gpunvme_err_t gpunvme_model_layer_count(gpunvme_model_t* model, uint32_t* count) {
  return guard([&] {
    GPUNVME_NEED(model);
    GPUNVME_NEED(count);
    *count = model->map->layers().empty() ? 0 : model->map->layers().back().layer + 1;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_model_expert_count(gpunvme_model_t* model, uint32_t* count) {
  return guard([&] {
    GPUNVME_NEED(model);
    GPUNVME_NEED(count);
    uint32_t n = 0;
    for (const auto& e : model->map->experts()) n = std::max(n, e.expert + 1);
    *count = n;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_model_tensor(gpunvme_model_t* model, const char* name, gpunvme_extent_t* extent,
                                   uint64_t* file_offset) {
  return guard([&] {
    GPUNVME_NEED(model);
    GPUNVME_NEED(name);
    const model::TensorExtent* t = model->map->find(name);
    if (!t) return fail(GPUNVME_ERR_NOT_FOUND, std::string("gpunvme_model_tensor: no tensor named '") + name + "'");
    if (extent) *extent = from_extent(t->extent);
    if (file_offset) *file_offset = t->tensor->file_offset;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_model_start_lba(gpunvme_model_t* model, uint64_t* start_lba) {
  return guard([&] {
    GPUNVME_NEED(model);
    GPUNVME_NEED(start_lba);
    *start_lba = model->detected.start_lba;
    return GPUNVME_OK;
  });
}

// ---- streamer ----

gpunvme_err_t gpunvme_streamer_create(gpunvme_queue_t* queue, const gpunvme_extent_t* extents, const uint32_t* layer_first,
                                      uint32_t n_layers, const gpunvme_streamer_opts_t* opts, gpunvme_streamer_t** out) {
  return guard([&] {
    GPUNVME_NEED(queue);
    GPUNVME_NEED(extents);
    GPUNVME_NEED(layer_first);
    GPUNVME_NEED(out);
    *out = nullptr;
    auto layers = extent_layers(extents, layer_first, n_layers, "gpunvme_streamer_create");
    auto s = std::make_unique<gpunvme_streamer>();
    s->queue = queue;
    const auto so = streamer_options(opts);
    s->s = std::make_unique<stream::LayerStreamer>(*queue->ctrl->ctrl, queue->submitter(opts && opts->pump_thread),
                                                   std::move(layers), so);
    s->lba = s->s->lba_bytes();
    s->status.assign(s->s->slot_count(), nullptr);
    ++queue->users;
    *out = s.release();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_create_from_model(gpunvme_queue_t* queue, gpunvme_model_t* model, int skip_experts,
                                                 const gpunvme_streamer_opts_t* opts, gpunvme_streamer_t** out) {
  return guard([&] {
    GPUNVME_NEED(queue);
    GPUNVME_NEED(model);
    GPUNVME_NEED(out);
    *out = nullptr;
    auto s = std::make_unique<gpunvme_streamer>();
    s->queue = queue;
    s->s = std::make_unique<stream::LayerStreamer>(*queue->ctrl->ctrl, queue->submitter(opts && opts->pump_thread),
                                                   plan::layer_extents(*model->map, skip_experts != 0),
                                                   streamer_options(opts));
    s->lba = s->s->lba_bytes();
    s->status.assign(s->s->slot_count(), nullptr);
    s->model_start_lba = model->detected.start_lba;
    s->from_model = true;
    ++queue->users;
    *out = s.release();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_destroy(gpunvme_streamer_t* s) {
  return guard([&] {
    if (!s) return GPUNVME_OK;
    std::unique_ptr<gpunvme_streamer> owned(s);
    if (owned->gq) {
      // Reads issued on streams end (bounded) before the slots go.
      try {
        owned->s->sync();
      } catch (...) {
      }
      for (uint32_t k = 0; k < owned->s->slot_count(); ++k) {
        try {
          if (!owned->s->ready(k)) owned->s->wait(k);  // host-begun loads
        } catch (...) {
        }
      }
      --owned->gq->users;
      return GPUNVME_OK;
    }
    // Reads must not land in freed slots: let everything in flight finish.
    for (uint32_t k = 0; k < owned->s->slot_count(); ++k) {
      try {
        if (!owned->s->ready(k)) owned->s->wait(k);
      } catch (...) {
      }
    }
    --owned->queue->users;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_begin(gpunvme_streamer_t* s, uint32_t layer, uint32_t slot) {
  return guard([&] {
    GPUNVME_NEED(s);
    s->s->begin(layer, slot);
    s->status[slot] = nullptr;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_ready(gpunvme_streamer_t* s, uint32_t slot, int* ready) {
  return guard([&] {
    GPUNVME_NEED(s);
    GPUNVME_NEED(ready);
    *ready = s->s->ready(slot) ? 1 : 0;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_wait(gpunvme_streamer_t* s, uint32_t slot, gpunvme_slot_view_t* view) {
  return guard([&] {
    GPUNVME_NEED(s);
    const stream::SlotView v = s->s->wait(slot);
    if (view) {
      view->host = v.host;
      view->device = v.device;
      view->bytes = v.bytes;
      view->layer = v.layer;
      view->n_pieces = uint32_t(v.plan->pieces.size());
    }
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_piece(gpunvme_streamer_t* s, uint32_t slot, uint32_t index, uint64_t* data_offset,
                                     uint64_t* byte_length) {
  return guard([&] {
    GPUNVME_NEED(s);
    const stream::SlotView v = s->s->wait(slot);  // a held slot: returns at once
    if (index >= v.plan->pieces.size())
      return fail(GPUNVME_ERR_INVALID_ARGUMENT, "gpunvme_streamer_piece: layer " + std::to_string(v.layer) + " has " +
                                                    std::to_string(v.plan->pieces.size()) + " pieces, not " +
                                                    std::to_string(index + 1));
    if (data_offset) *data_offset = v.plan->pieces[index].data_offset;
    if (byte_length) *byte_length = v.plan->pieces[index].source.byte_length;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_locate(gpunvme_streamer_t* s, uint32_t slot, uint64_t file_offset, uint64_t* slot_offset) {
  return guard([&] {
    GPUNVME_NEED(s);
    GPUNVME_NEED(slot_offset);
    const stream::SlotView v = s->s->wait(slot);
    const auto at = v.plan->locate(s->model_start_lba * s->lba + file_offset, s->lba);
    if (!at)
      return fail(GPUNVME_ERR_NOT_FOUND, "gpunvme_streamer_locate: file byte " + std::to_string(file_offset) +
                                             " is not part of layer " + std::to_string(v.layer));
    *slot_offset = *at;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_release(gpunvme_streamer_t* s, uint32_t slot) {
  return guard([&] {
    GPUNVME_NEED(s);
    s->s->release(slot);
    s->status[slot] = nullptr;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_stats(gpunvme_streamer_t* s, gpunvme_stream_stats_t* out) {
  return guard([&] {
    GPUNVME_NEED(s);
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

// ---- fetcher ----

gpunvme_err_t gpunvme_fetcher_create_from_model(gpunvme_queue_t* queue, gpunvme_model_t* model,
                                                gpunvme_expert_parts_t parts, const gpunvme_fetcher_opts_t* opts,
                                                gpunvme_fetcher_t** out) {
  return guard([&] {
    GPUNVME_NEED(queue);
    GPUNVME_NEED(model);
    GPUNVME_NEED(out);
    *out = nullptr;
    auto f = std::make_unique<gpunvme_fetcher>();
    f->queue = queue;
    f->f = std::make_unique<stream::ExpertFetcher>(
        *queue->ctrl->ctrl, queue->submitter(opts && opts->pump_thread),
        stream::ExpertCatalog::from_map(*model->map, parts == GPUNVME_EXPERTS_DOWN_ONLY ? stream::ExpertParts::kDownOnly
                                                                                        : stream::ExpertParts::kAll),
        fetcher_options(opts));
    ++queue->users;
    *out = f.release();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_create(gpunvme_queue_t* queue, const gpunvme_extent_t* parts, uint32_t n_layers,
                                     uint32_t n_experts, uint32_t parts_per_expert, const gpunvme_fetcher_opts_t* opts,
                                     gpunvme_fetcher_t** out) {
  return guard([&] {
    GPUNVME_NEED(queue);
    GPUNVME_NEED(parts);
    GPUNVME_NEED(out);
    *out = nullptr;
    if (parts_per_expert == 0 || parts_per_expert > 3)
      return fail(GPUNVME_ERR_INVALID_ARGUMENT, "gpunvme_fetcher_create: parts_per_expert must be 1..3");
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
    auto f = std::make_unique<gpunvme_fetcher>();
    f->queue = queue;
    f->f = std::make_unique<stream::ExpertFetcher>(*queue->ctrl->ctrl, queue->submitter(opts && opts->pump_thread),
                                                   std::move(c), fetcher_options(opts));
    ++queue->users;
    *out = f.release();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_destroy(gpunvme_fetcher_t* f) {
  return guard([&] {
    if (!f) return GPUNVME_OK;
    std::unique_ptr<gpunvme_fetcher> owned(f);
    owned->f.reset();  // drains reads in flight
    owned->g.reset();
    if (owned->queue) --owned->queue->users;
    if (owned->gq) --owned->gq->users;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_fetch(gpunvme_fetcher_t* f, uint32_t layer, const uint32_t* experts, uint32_t n,
                                    uint32_t* n_selected) {
  return guard([&] {
    GPUNVME_NEED(f);
    if (f->g) return gpu_fetcher_refuses("gpunvme_fetcher_fetch");
    if (n > 0) GPUNVME_NEED(experts);
    const auto& r = f->f->fetch(layer, std::span<const uint32_t>(experts, n));
    if (n_selected) *n_selected = uint32_t(r.size());
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_ready(gpunvme_fetcher_t* f, uint32_t index, int* ready) {
  return guard([&] {
    GPUNVME_NEED(f);
    GPUNVME_NEED(ready);
    if (f->g) return gpu_fetcher_refuses("gpunvme_fetcher_ready");
    *ready = f->f->ready(index) ? 1 : 0;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_wait(gpunvme_fetcher_t* f, uint32_t index) {
  return guard([&] {
    GPUNVME_NEED(f);
    if (f->g) return gpu_fetcher_refuses("gpunvme_fetcher_wait");
    f->f->wait(index);
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_wait_all(gpunvme_fetcher_t* f) {
  return guard([&] {
    GPUNVME_NEED(f);
    if (f->g) return gpu_fetcher_refuses("gpunvme_fetcher_wait_all");
    f->f->wait_all();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_expert(gpunvme_fetcher_t* f, uint32_t index, gpunvme_fetched_expert_t* out) {
  return guard([&] {
    GPUNVME_NEED(f);
    GPUNVME_NEED(out);
    const auto& r = fetched(f, "gpunvme_fetcher_expert");
    if (index >= r.size())
      return fail(GPUNVME_ERR_INVALID_ARGUMENT, "gpunvme_fetcher_expert: the last fetch selected " +
                                                    std::to_string(r.size()) + " experts");
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
  return guard([&] {
    GPUNVME_NEED(f);
    const auto& r = fetched(f, "gpunvme_fetcher_part");
    if (index >= r.size() || part >= r[index].parts.size())
      return fail(GPUNVME_ERR_INVALID_ARGUMENT, "gpunvme_fetcher_part: no part " + std::to_string(part) +
                                                    " of selection " + std::to_string(index));
    const auto& p = r[index].parts[part];
    if (proj) *proj = static_cast<gpunvme_projection_t>(p.proj);
    if (offset) *offset = p.offset;
    if (bytes) *bytes = p.bytes;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_scratchpad(gpunvme_fetcher_t* f, const void** host, const void** device, uint64_t* bytes) {
  return guard([&] {
    GPUNVME_NEED(f);
    const host::DmaBuffer& sp = f->g ? f->g->scratchpad() : f->f->scratchpad();
    if (host) *host = sp.host();
    if (device) *device = sp.device();
    if (bytes) *bytes = sp.size();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_metrics(gpunvme_fetcher_t* f, gpunvme_fetch_metrics_t* out) {
  return guard([&] {
    GPUNVME_NEED(f);
    GPUNVME_NEED(out);
    const stream::FetcherMetrics m = f->g ? f->g->metrics() : f->f->metrics();
    *out = {};
    out->tokens = m.tokens;
    out->requested = m.requested;
    out->faults = m.faults;
    out->hits = m.hits;
    out->bytes_read = m.bytes_read;
    out->steady_tokens = m.steady_tokens;
    out->steady_faults = m.steady_faults;
    out->last_faults = m.last_faults;
    out->cache_capacity = f->g ? f->g->cache_capacity() : f->f->cache_capacity();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_resident(gpunvme_fetcher_t* f, uint32_t* counts, uint32_t n) {
  return guard([&] {
    GPUNVME_NEED(f);
    if (n > 0) GPUNVME_NEED(counts);
    const auto r = f->g ? f->g->resident_per_layer() : f->f->resident_per_layer();
    for (uint32_t i = 0; i < n; ++i) counts[i] = i < r.size() ? r[i] : 0;
    return GPUNVME_OK;
  });
}

// ---- GPU path ----

gpunvme_err_t gpunvme_gpu_available(void) {
  return guard([&] {
    GPUNVME_NEED_GPU("gpunvme_gpu_available");
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_gpu_queues_create(gpunvme_ctrl_t* ctrl, uint16_t first_qid, uint32_t count, uint32_t entries,
                                        gpunvme_gpu_queues_t** out) {
  return guard([&] {
    if (out) *out = nullptr;
    GPUNVME_NEED_GPU("gpunvme_gpu_queues_create");
    GPUNVME_NEED(ctrl);
    GPUNVME_NEED(out);
    if (count == 0) return fail(GPUNVME_ERR_INVALID_ARGUMENT, "gpunvme_gpu_queues_create: count must be at least 1");
    if (first_qid == 0 || uint64_t(first_qid) + count - 1 > ctrl->ctrl->io_queues_granted())
      return fail(GPUNVME_ERR_INVALID_ARGUMENT,
                  "gpunvme_gpu_queues_create: qids " + std::to_string(first_qid) + ".." +
                      std::to_string(uint64_t(first_qid) + count - 1) + " are not all I/O queues the controller granted (1.." +
                      std::to_string(ctrl->ctrl->io_queues_granted()) + ")");
    auto gq = std::make_unique<gpunvme_gpu_queues>();
    gq->ctrl = ctrl;
    host::DmaOptions mem;
    mem.gpu_mapped = true;
    try {
      for (uint32_t i = 0; i < count; ++i) {
        gq->qps.push_back(ctrl->ctrl->create_io_queue_pair(uint16_t(first_qid + i), entries, mem));
        ++ctrl->queues;
      }
      std::vector<host::QueuePair*> raw;
      for (auto& qp : gq->qps) raw.push_back(qp.get());
      gq->sub = std::make_unique<capi_gpu::GpuSubmitter>(*ctrl->ctrl, std::move(raw), gq->nsid);
    } catch (...) {
      gq->sub.reset();
      for (auto& qp : gq->qps) {
        --ctrl->queues;
        try {
          ctrl->ctrl->delete_io_queue_pair(*qp);
        } catch (...) {
        }
      }
      throw;
    }
    *out = gq.release();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_gpu_queues_destroy(gpunvme_gpu_queues_t* gq) {
  return guard([&] {
    if (!gq) return GPUNVME_OK;
    if (gq->users > 0)
      return fail(GPUNVME_ERR_INVALID_ARGUMENT, "gpunvme_gpu_queues_destroy: " + std::to_string(gq->users) +
                                                    " streamers/fetchers still use these GPU queues; destroy them first");
    std::unique_ptr<gpunvme_gpu_queues> owned(gq);
    owned->sub.reset();  // waits (bounded) for kernels still running
    std::exception_ptr first;
    for (auto& qp : owned->qps) {
      --owned->ctrl->queues;
      try {
        owned->ctrl->ctrl->delete_io_queue_pair(*qp);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_create_gpu(gpunvme_gpu_queues_t* gq, const gpunvme_extent_t* extents,
                                          const uint32_t* layer_first, uint32_t n_layers,
                                          const gpunvme_streamer_opts_t* opts, gpunvme_streamer_t** out) {
  return guard([&] {
    if (out) *out = nullptr;
    GPUNVME_NEED_GPU("gpunvme_streamer_create_gpu");
    GPUNVME_NEED(gq);
    GPUNVME_NEED(extents);
    GPUNVME_NEED(layer_first);
    GPUNVME_NEED(out);
    return make_gpu_streamer(gq, extent_layers(extents, layer_first, n_layers, "gpunvme_streamer_create_gpu"), opts,
                             nullptr, out);
  });
}

gpunvme_err_t gpunvme_streamer_create_gpu_from_model(gpunvme_gpu_queues_t* gq, gpunvme_model_t* model,
                                                     int skip_experts, const gpunvme_streamer_opts_t* opts,
                                                     gpunvme_streamer_t** out) {
  return guard([&] {
    if (out) *out = nullptr;
    GPUNVME_NEED_GPU("gpunvme_streamer_create_gpu_from_model");
    GPUNVME_NEED(gq);
    GPUNVME_NEED(model);
    GPUNVME_NEED(out);
    if (model->queue->ctrl != gq->ctrl)
      return fail(GPUNVME_ERR_INVALID_ARGUMENT,
                  "gpunvme_streamer_create_gpu_from_model: the model and the GPU queues belong to different controllers");
    return make_gpu_streamer(gq, plan::layer_extents(*model->map, skip_experts != 0), opts, model, out);
  });
}

gpunvme_err_t gpunvme_streamer_begin_on(gpunvme_streamer_t* s, uint32_t layer, uint32_t slot,
                                        gpunvme_cuda_stream_t io) {
  return guard([&] {
    GPUNVME_NEED_GPU("gpunvme_streamer_begin_on");
    GPUNVME_NEED(s);
    s->s->begin(layer, slot, io);
    s->status[slot] = nullptr;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_wait_on(gpunvme_streamer_t* s, uint32_t slot, gpunvme_cuda_stream_t compute,
                                       gpunvme_slot_view_t* view) {
  return guard([&] {
    GPUNVME_NEED_GPU("gpunvme_streamer_wait_on");
    GPUNVME_NEED(s);
    const stream::SlotView v = s->s->wait(slot, compute);
    s->status[slot] = v.status;
    if (view) {
      view->host = v.host;
      view->device = v.device;
      view->bytes = v.bytes;
      view->layer = v.layer;
      view->n_pieces = uint32_t(v.plan->pieces.size());
    }
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_status(gpunvme_streamer_t* s, uint32_t slot, const uint32_t** status) {
  return guard([&] {
    GPUNVME_NEED_GPU("gpunvme_streamer_status");
    GPUNVME_NEED(s);
    GPUNVME_NEED(status);
    if (slot >= s->status.size())
      return fail(GPUNVME_ERR_INVALID_ARGUMENT, "gpunvme_streamer_status: slot " + std::to_string(slot) +
                                                    " does not exist (" + std::to_string(s->status.size()) + " slots)");
    *status = s->status[slot];
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_release_on(gpunvme_streamer_t* s, uint32_t slot, gpunvme_cuda_stream_t compute) {
  return guard([&] {
    GPUNVME_NEED_GPU("gpunvme_streamer_release_on");
    GPUNVME_NEED(s);
    s->s->release(slot, compute);
    s->status[slot] = nullptr;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_streamer_sync(gpunvme_streamer_t* s) {
  return guard([&] {
    GPUNVME_NEED_GPU("gpunvme_streamer_sync");
    GPUNVME_NEED(s);
    s->s->sync();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_create_gpu_from_model(gpunvme_gpu_queues_t* gq, gpunvme_model_t* model,
                                                    gpunvme_expert_parts_t parts, const gpunvme_fetcher_opts_t* opts,
                                                    gpunvme_fetcher_t** out) {
  return guard([&] {
    if (out) *out = nullptr;
    GPUNVME_NEED_GPU("gpunvme_fetcher_create_gpu_from_model");
    GPUNVME_NEED(gq);
    GPUNVME_NEED(model);
    GPUNVME_NEED(out);
    if (model->queue->ctrl != gq->ctrl)
      return fail(GPUNVME_ERR_INVALID_ARGUMENT,
                  "gpunvme_fetcher_create_gpu_from_model: the model and the GPU queues belong to different controllers");
    const stream::FetcherOptions fo = fetcher_options(opts);
    if (fo.nsid != gq->nsid)
      return fail(GPUNVME_ERR_INVALID_ARGUMENT, "gpunvme_fetcher_create_gpu_from_model: opts->nsid " +
                                                    std::to_string(fo.nsid) + ": the GPU queues read namespace " +
                                                    std::to_string(gq->nsid));
    auto f = std::make_unique<gpunvme_fetcher>();
    f->gq = gq;
    f->g = std::make_unique<capi_gpu::GpuExpertFetcher>(
        *gq->ctrl->ctrl, *gq->sub,
        stream::ExpertCatalog::from_map(*model->map, parts == GPUNVME_EXPERTS_DOWN_ONLY ? stream::ExpertParts::kDownOnly
                                                                                        : stream::ExpertParts::kAll),
        fo);
    ++gq->users;
    *out = f.release();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_fetch_on(gpunvme_fetcher_t* f, uint32_t layer, const uint32_t* device_ids, uint32_t n,
                                       gpunvme_cuda_stream_t stream) {
  return guard([&] {
    GPUNVME_NEED_GPU("gpunvme_fetcher_fetch_on");
    GPUNVME_NEED(f);
    if (!f->g) return cpu_fetcher_refuses("gpunvme_fetcher_fetch_on");
    if (n > 0) GPUNVME_NEED(device_ids);
    f->g->fetch(layer, device_ids, n, stream);
    f->gpu_result.clear();
    f->gpu_pending = true;
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_wait_gpu(gpunvme_fetcher_t* f, uint32_t* n_selected) {
  return guard([&] {
    if (n_selected) *n_selected = 0;
    GPUNVME_NEED_GPU("gpunvme_fetcher_wait_gpu");
    GPUNVME_NEED(f);
    if (!f->g) return cpu_fetcher_refuses("gpunvme_fetcher_wait_gpu");
    f->gpu_result.clear();
    f->gpu_pending = false;  // waited for, even when it failed: nothing of it is described
    f->gpu_result = f->g->wait();
    if (n_selected) *n_selected = uint32_t(f->gpu_result.size());
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_fetcher_device_result(gpunvme_fetcher_t* f, const gpunvme_gpu_fetch_result_t** result,
                                            const gpunvme_gpu_fetched_expert_t** experts,
                                            const uint32_t** selection) {
  return guard([&] {
    GPUNVME_NEED_GPU("gpunvme_fetcher_device_result");
    GPUNVME_NEED(f);
    if (!f->g) return cpu_fetcher_refuses("gpunvme_fetcher_device_result");
    if (result) *result = reinterpret_cast<const gpunvme_gpu_fetch_result_t*>(f->g->device_result());
    if (experts) *experts = reinterpret_cast<const gpunvme_gpu_fetched_expert_t*>(f->g->device_experts());
    if (selection) *selection = f->g->device_selection();
    return GPUNVME_OK;
  });
}

}  // extern "C"
