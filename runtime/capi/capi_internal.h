// What the C API's files share: the error guard every entry point runs in, the handle checks
// (NULL, live, not in use by another thread), the handle structs, and the one interface over the
// CPU and GPU expert fetchers. Internal: never installed, never included by C code.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "host/controller.h"
#include "host/error.h"
#include "runtime/capi/gpunvme.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/block_io.h"
#include "runtime/model/detect.h"
#include "runtime/model/lba_map.h"
#include "runtime/stream/cpu_submitter.h"
#include "runtime/stream/expert_fetcher.h"
#include "runtime/stream/layer_streamer.h"

namespace gpunvme::capi {

// ---- Errors (errors.cpp) ----

// The calling thread's message, and the entry point it is in (for messages written below it).
const char* last_message();
const char* current_call();
// The code for the exception being handled; its text becomes the message.
gpunvme_err_t from_current_exception() noexcept;
// Refusal with a message: `return fail(GPUNVME_ERR_..., "...")`.
gpunvme_err_t fail(gpunvme_err_t e, const std::string& msg);
// Throws kInvalidArgument "<current call>: <msg>" (misuse found below the entry point).
[[noreturn]] void refuse(const std::string& msg);

class CallScope {
 public:
  explicit CallScope(const char* fn);
  ~CallScope();
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  const char* outer_;
};

// Runs one entry point: clears the thread's message, turns every exception into a code + message.
template <class F>
gpunvme_err_t guard(const char* fn, F&& body) noexcept {
  CallScope scope(fn);
  try {
    return body();
  } catch (...) {
    return from_current_exception();
  }
}

// A pointer argument that must not be NULL.
#define GPUNVME_NEED(p)                                                                         \
  do {                                                                                          \
    if (!(p)) ::gpunvme::capi::refuse(std::string("argument '") + #p + "' is NULL");              \
  } while (0)

// ---- Handles ----

// Every handle starts with a type tag that its destroy call clears (a call on a destroyed handle
// is refused while its memory still reads back, which costs one compare) and a mutex a call holds
// while it works on the handle: a second thread's call is refused, not interleaved.
struct Handle {
  explicit Handle(uint32_t tag) : magic(tag) {}
  uint32_t magic;
  std::mutex in_use;
};

// A handle type's tag, set on construction.
template <uint32_t Tag>
struct TaggedHandle : Handle {
  static constexpr uint32_t kTag = Tag;
  TaggedHandle() : Handle(Tag) {}
};

// Checks `h` (argument `arg`): not NULL, a live handle of its type. Throws kInvalidArgument.
void check_live(const Handle* h, uint32_t tag, const char* arg, const char* type);
template <class H>
H& live(H* h, const char* arg) {
  check_live(h, H::kTag, arg, H::kType);
  return *h;
}
// live(), then held by this call until the lock goes; another thread's call inside it: refused.
std::unique_lock<std::mutex> claim_handle(Handle* h, uint32_t tag, const char* arg, const char* type);
template <class H>
[[nodiscard]] std::unique_lock<std::mutex> claim(H* h, const char* arg) {
  return claim_handle(h, H::kTag, arg, H::kType);
}
// Destroy calls: the claimed handle is marked dead, unlocked and freed.
template <class H>
void destroy(H* h, std::unique_lock<std::mutex>& held) {
  h->magic = 0;
  held.unlock();
  delete h;
}

// What a streamer or fetcher reads through: a CPU queue or a set of GPU queues.
class SubmitterSource {
 public:
  virtual ~SubmitterSource() = default;
  virtual host::Controller& controller() = 0;
  virtual bool on_gpu() const = 0;
  // One more user; the submitter it reads through. pump_thread: see gpunvme_queue.
  virtual stream::Submitter& attach(bool pump_thread) = 0;
  virtual void detach() noexcept = 0;
  // Refuses (kInvalidArgument) while streamers/fetchers use it; `what` names it.
  void check_unused(const char* what) const {
    if (users > 0)
      refuse(std::to_string(users) + " streamers/fetchers still use " + what + "; destroy them first");
  }

 protected:
  uint32_t users = 0;  // streamers/fetchers attached (guarded by the owning handle's in_use)
};

// One user of a SubmitterSource, detached when it goes. Declared before the streamer/fetcher it
// serves, so that one is destroyed (its reads drained) first.
class Attachment {
 public:
  Attachment() = default;
  ~Attachment() {
    if (source_) source_->detach();
  }
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;
  stream::Submitter& attach(SubmitterSource& source, bool pump_thread) {
    stream::Submitter& s = source.attach(pump_thread);
    source_ = &source;
    return s;
  }
  SubmitterSource& source() const { return *source_; }

 private:
  SubmitterSource* source_ = nullptr;
};

// ---- Fetchers (fetcher.cpp, gpu_cuda.cpp) ----

// The device pointers a GPU fetcher leaves for consumer kernels.
struct GpuFetchPointers {
  const void* result = nullptr;
  const void* experts = nullptr;
  const uint32_t* selection = nullptr;
};

// One interface over the CPU and the GPU expert fetcher, so every C call is written once. The
// calls of the other path refuse with GPUNVME_ERR_UNSUPPORTED naming the right call.
class FetcherImpl {
 public:
  virtual ~FetcherImpl() = default;
  // CPU path: returns the distinct experts selected.
  virtual uint32_t fetch(uint32_t layer, std::span<const uint32_t> experts);
  virtual bool ready(uint32_t index);
  virtual void wait(uint32_t index);
  virtual void wait_all();
  // GPU path.
  virtual void fetch_on(uint32_t layer, const uint32_t* device_ids, uint32_t n, gpunvme_cuda_stream_t stream);
  virtual uint32_t wait_gpu();  // the distinct experts selected
  virtual GpuFetchPointers device_pointers() const;
  // Both.
  virtual const host::DmaBuffer& scratchpad() const = 0;
  virtual stream::FetcherMetrics metrics() const = 0;
  virtual uint32_t cache_capacity() const = 0;
  virtual std::vector<uint32_t> resident_per_layer() const = 0;
  // What the latest fetch selected; refuses while there is none to describe.
  const std::vector<stream::FetchedExpert>& described() const;

 protected:
  virtual const std::vector<stream::FetchedExpert>& latest() const = 0;
  // Why there is nothing to describe (no fetch yet, the latest failed, a fetch_on not yet waited
  // for); nullptr once a fetch succeeded.
  const char* undescribed_ = "no fetch was made yet";
};

std::unique_ptr<FetcherImpl> make_cpu_fetcher(host::Controller& c, stream::Submitter& sub, stream::ExpertCatalog cat,
                                              const stream::FetcherOptions& o);

// ---- The GPU path (gpu_cuda.cpp in CUDA builds, stubs_nocuda.cpp otherwise) ----

// Why the GPU path cannot be used in this process (asked once), or nullptr when it can.
const std::string* gpu_unavailable();
// Refuses (GPUNVME_ERR_UNSUPPORTED, with the reason) when the GPU path cannot be used.
void need_gpu();
std::unique_ptr<stream::Submitter> make_gpu_submitter(host::Controller& c, std::vector<host::QueuePair*> queues,
                                                      uint32_t nsid);
std::unique_ptr<FetcherImpl> make_gpu_fetcher(host::Controller& c, stream::Submitter& gpu_submitter,
                                              stream::ExpertCatalog cat, const stream::FetcherOptions& o);

// ---- Streamers and fetchers (streamer.cpp, fetcher.cpp): what the CPU and GPU creates share ----

using Layers = std::vector<std::vector<model::Extent>>;
Layers extent_layers(const gpunvme_extent_t* extents, const uint32_t* layer_first, uint32_t n_layers);
// The model's layers; refuses a model opened on another controller than src's.
Layers model_layers(SubmitterSource& src, const gpunvme_model* model, int skip_experts);
gpunvme_err_t make_streamer(SubmitterSource& src, Layers layers, const gpunvme_streamer_opts_t* opts,
                            const gpunvme_model* model, gpunvme_streamer_t** out);
void check_slot(const gpunvme_streamer& s, uint32_t slot);
void fill_view(const stream::SlotView& v, gpunvme_slot_view_t* view);
// An enum argument's value as C passed it (any int), without loading it as the C++ enum.
int32_t parts_value(const gpunvme_expert_parts_t& parts);
// The model's experts; refuses a model of another controller and parts not 0 or 1.
stream::ExpertCatalog model_catalog(SubmitterSource& src, const gpunvme_model* model, int32_t parts);
stream::FetcherOptions fetcher_options(const gpunvme_fetcher_opts_t* o);
gpunvme_err_t make_fetcher(SubmitterSource& src, stream::ExpertCatalog catalog, const gpunvme_fetcher_opts_t* opts,
                           gpunvme_fetcher_t** out);

// ---- Shared helpers ----

model::Extent to_extent(const gpunvme_extent_t& e);
gpunvme_extent_t from_extent(const model::Extent& x);
// Synchronous whole-block transfer through a bounce buffer (queue.cpp); the caller checked the range.
void transfer(host::Controller& c, host::QueuePair& qp, uint32_t nsid, uint64_t slba, uint64_t nblocks, void* buf,
              bool write);

}  // namespace gpunvme::capi

// ---- The handle structs (the C header declares them incomplete) ----

struct gpunvme_ctrl : gpunvme::capi::TaggedHandle<0x4E435452> {  // "NCTR"
  static constexpr const char* kType = "gpunvme_ctrl_t";
  std::unique_ptr<gpunvme::host::Controller> ctrl;
  std::atomic<uint32_t> queues{0};  // I/O queues (CPU and GPU) not yet deleted
};

// A CPU queue. Synchronous I/O (gpunvme_read / _write, model_open) claims it; streamers and
// fetchers share one CpuSubmitter over it, made for the first and destroyed with the last (its
// pump thread with it), so the queue is the caller's again once they are gone.
struct gpunvme_queue : gpunvme::capi::TaggedHandle<0x4E515545>, gpunvme::capi::SubmitterSource {  // "NQUE"
  static constexpr const char* kType = "gpunvme_queue_t";
  gpunvme_ctrl* ctrl = nullptr;
  std::unique_ptr<gpunvme::host::QueuePair> qp;
  std::unique_ptr<gpunvme::stream::CpuSubmitter> sub;  // while users > 0
  bool pump = false;                                   // sub's pump thread

  gpunvme::host::Controller& controller() override { return *ctrl->ctrl; }
  bool on_gpu() const override { return false; }
  gpunvme::stream::Submitter& attach(bool pump_thread) override;
  void detach() noexcept override;
  // Refuses synchronous I/O while streamers/fetchers use the queue.
  void check_not_driven() const;
};

struct gpunvme_model : gpunvme::capi::TaggedHandle<0x4E4D4F44> {  // "NMOD"
  static constexpr const char* kType = "gpunvme_model_t";
  gpunvme_queue* queue = nullptr;
  gpunvme::model::DetectedModel detected;
  std::unique_ptr<gpunvme::gguf::GgufFile> file;
  std::unique_ptr<gpunvme::model::LbaMap> map;
};

// Queue pairs handed to GPU kernels, and the GPU submitter over them.
struct gpunvme_gpu_queues : gpunvme::capi::TaggedHandle<0x4E475055>, gpunvme::capi::SubmitterSource {  // "NGPU"
  static constexpr const char* kType = "gpunvme_gpu_queues_t";
  gpunvme_ctrl* ctrl = nullptr;
  std::vector<std::unique_ptr<gpunvme::host::QueuePair>> qps;
  std::unique_ptr<gpunvme::stream::Submitter> sub;
  uint32_t nsid = 1;  // of the kernels' own reads (DeviceQueueSet)

  gpunvme::host::Controller& controller() override { return *ctrl->ctrl; }
  bool on_gpu() const override { return true; }
  gpunvme::stream::Submitter& attach(bool) override;
  void detach() noexcept override;
};

struct gpunvme_streamer : gpunvme::capi::TaggedHandle<0x4E535452> {  // "NSTR"
  static constexpr const char* kType = "gpunvme_streamer_t";
  gpunvme::capi::Attachment use;  // before s: goes after it
  std::unique_ptr<gpunvme::stream::LayerStreamer> s;
  std::vector<const uint32_t*> status;      // per slot: the state word of a held GPU-ordered load
  uint32_t lba = 0;
  std::optional<uint64_t> model_start_lba;  // streamers made from a model
};

struct gpunvme_fetcher : gpunvme::capi::TaggedHandle<0x4E464554> {  // "NFET"
  static constexpr const char* kType = "gpunvme_fetcher_t";
  gpunvme::capi::Attachment use;  // before impl: goes after it
  std::unique_ptr<gpunvme::capi::FetcherImpl> impl;
};
