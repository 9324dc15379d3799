// gpunvme._runtime's plumbing over the C API (runtime/capi/gpunvme.h): owners that free each C handle once
// (children hold their parent, so the C API's order -- streamers and fetchers before their model's queue,
// models and queues before the controller -- is the order of destruction, whatever Python frees first), C API
// failures as Python exceptions, zero-copy memoryviews that keep their memory's owner alive, and the one
// bounded polling wait every Python-side wait uses.
#ifndef GPUNVME_RUNTIME_PYTHON_RUNTIME_HANDLES_H
#define GPUNVME_RUNTIME_PYTHON_RUNTIME_HANDLES_H

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/capi/gpunvme.h"

namespace gpunvme::python {

namespace nb = nanobind;

// A C API failure as its Python kind: bad arguments ValueError, a missing device FileNotFoundError, access
// PermissionError, an expired bounded wait TimeoutError, a missing feature NotImplementedError, the rest
// RuntimeError; the message is the C API's (what failed, and the fix).
[[noreturn]] inline void raise_error(gpunvme_err_t e, const std::string& msg) {
  PyObject* kind = e == GPUNVME_ERR_INVALID_ARGUMENT ? PyExc_ValueError
                   : e == GPUNVME_ERR_NOT_FOUND      ? PyExc_FileNotFoundError
                   : e == GPUNVME_ERR_PERMISSION     ? PyExc_PermissionError
                   : e == GPUNVME_ERR_TIMEOUT        ? PyExc_TimeoutError
                   : e == GPUNVME_ERR_UNSUPPORTED    ? PyExc_NotImplementedError
                                                     : PyExc_RuntimeError;
  PyErr_SetString(kind, msg.c_str());
  throw nb::python_error();
}

[[noreturn]] inline void raise_kind(PyObject* kind, const std::string& msg) {
  PyErr_SetString(kind, msg.c_str());
  throw nb::python_error();
}

inline void check(gpunvme_err_t e) {
  if (e != GPUNVME_OK) raise_error(e, gpunvme_last_error_message());
}

// The controller, and which of its I/O queue ids the open models hold.
struct CtrlOwner {
  gpunvme_ctrl_t* ctrl = nullptr;
  std::string spec;
  uint32_t queue_entries = 0;
  std::vector<bool> qid_used;  // by qid (0: the admin queue, never handed out)
  CtrlOwner() = default;
  CtrlOwner(const CtrlOwner&) = delete;
  CtrlOwner& operator=(const CtrlOwner&) = delete;
  ~CtrlOwner() { gpunvme_ctrl_shutdown(ctrl); }
  // The first of `count` consecutive free qids, marked held; RuntimeError when no such run is free.
  uint16_t take_qids(uint32_t count) {
    for (size_t first = 1; first + count <= qid_used.size(); ++first) {
      if (std::find(qid_used.begin() + long(first), qid_used.begin() + long(first + count), true) !=
          qid_used.begin() + long(first + count))
        continue;
      std::fill_n(qid_used.begin() + long(first), count, true);
      return uint16_t(first);
    }
    raise_kind(PyExc_RuntimeError, "no " + std::to_string(count) + " free I/O queue(s) of the " +
                                       std::to_string(qid_used.size() - 1) + " of " + spec +
                                       " (open models and GPU queue sets hold them); close some (with their streamers, "
                                       "fetchers and views)");
  }
  void give_qids(uint16_t first, uint32_t count) {
    if (first) std::fill_n(qid_used.begin() + first, count, false);
  }
};

// A model and its own I/O queue: its header is read through it, and its streamers and fetchers share it
// (and its submitter). A queue per model lets a Device open models while others' streamers drive theirs.
struct ModelOwner {
  std::shared_ptr<CtrlOwner> ctrl;
  uint16_t qid = 0;
  gpunvme_queue_t* queue = nullptr;
  gpunvme_model_t* model = nullptr;
  uint32_t layers = 0, experts = 0;
  ModelOwner() = default;
  ModelOwner(const ModelOwner&) = delete;
  ModelOwner& operator=(const ModelOwner&) = delete;
  ~ModelOwner() {
    gpunvme_model_close(model);
    gpunvme_delete_io_queue(queue);
    ctrl->give_qids(qid, 1);
  }
};

// A GPU queue set (the GPU path: GPU warps drive its queue pairs, qids first .. first + count - 1).
struct GpuQueuesOwner {
  std::shared_ptr<CtrlOwner> ctrl;
  uint16_t first = 0;
  uint32_t count = 0;
  gpunvme_gpu_queues_t* gq = nullptr;
  GpuQueuesOwner() = default;
  GpuQueuesOwner(const GpuQueuesOwner&) = delete;
  GpuQueuesOwner& operator=(const GpuQueuesOwner&) = delete;
  ~GpuQueuesOwner() {
    gpunvme_gpu_queues_destroy(gq);
    ctrl->give_qids(first, count);
  }
};

// A streamer's or fetcher's C handle, freed (its reads drained, bounded) when the Python object and every
// view of its memory are gone. `open` is cleared by close(): later calls are refused while views live on.
template <class H, gpunvme_err_t (*Destroy)(H*)>
struct UserOwner {
  std::shared_ptr<ModelOwner> model;  // these two before the handle: freed after it
  std::shared_ptr<GpuQueuesOwner> gpu_queues;  // a GPU streamer's (it frees the streamer's memory)
  H* handle = nullptr;
  bool open = true;
  uint64_t generation = 0;  // streamer: unused; fetcher: fetches made, so a Fetch knows it was replaced
  std::vector<uint64_t> slot_generation;  // streamer: releases per slot, so a Slot knows it was released
  UserOwner() = default;
  UserOwner(const UserOwner&) = delete;
  UserOwner& operator=(const UserOwner&) = delete;
  ~UserOwner() { Destroy(handle); }
};
using StreamerOwner = UserOwner<gpunvme_streamer_t, gpunvme_streamer_destroy>;
using FetcherOwner = UserOwner<gpunvme_fetcher_t, gpunvme_fetcher_destroy>;

// Read-only bytes [p, p + n) as a memoryview (no copy) that keeps `keep` -- the memory's owner -- alive.
using ByteView = nb::ndarray<nb::memview, const uint8_t, nb::ndim<1>>;
template <class T>
ByteView bytes_view(const void* p, uint64_t n, std::shared_ptr<T> keep) {
  auto* holder = new std::shared_ptr<T>(std::move(keep));
  nb::capsule owner(holder, [](void* h) noexcept { delete static_cast<std::shared_ptr<T>*>(h); });
  const size_t shape[1] = {size_t(n)};
  return ByteView(p, 1, shape, owner);
}

inline std::string seconds_text(double t) {
  char b[32];
  std::snprintf(b, sizeof b, "%g s", t);
  return b;
}

// Every wait takes a finite timeout above 0 seconds: a wait that cannot end is refused up front.
inline void check_timeout(double timeout) {
  if (!(timeout > 0) || !std::isfinite(timeout))
    raise_kind(PyExc_ValueError, "timeout must be a finite number of seconds above 0 (got " + seconds_text(timeout) +
                                     "); every wait is bounded: pass e.g. timeout=10.0");
}

// Polls ready(int*) (a non-blocking C API call) until it reports 1, sleeping between polls with the GIL
// released; TimeoutError naming `what` once `timeout` seconds passed (the reads go on: waiting again is
// allowed). The polls themselves run with the GIL held, as every other call on a handle does: the GIL
// serializes them, so other threads' calls run between the polls instead of being refused by the C API's
// one-thread-per-handle check. A failing poll raises its error.
template <class Ready>
void wait_for(double timeout, const std::string& what, Ready ready) {
  check_timeout(timeout);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  auto nap = std::chrono::microseconds(20);
  for (;;) {
    int done = 0;
    check(ready(&done));
    if (done) return;
    if (std::chrono::steady_clock::now() >= deadline)
      raise_kind(PyExc_TimeoutError, what + " did not arrive within " + seconds_text(timeout) +
                                         "; wait again with a longer timeout, or check the device (gpunvme doctor)");
    nb::gil_scoped_release unlocked;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));  // short waits stay short, long ones cheap
  }
}

// A CUDA stream given from Python as its cudaStream_t's address (0: the legacy default stream).
inline gpunvme_cuda_stream_t cuda_stream(uint64_t address) { return reinterpret_cast<gpunvme_cuda_stream_t>(uintptr_t(address)); }

// ValueError unless 0 <= index < n: "<what> 9 does not exist: <owner> has 2 <what>s (0..1)<hint>". Ids
// come in as int64 so that a negative one gets this message too, not a binding's type error.
inline uint32_t check_index(const char* what, int64_t index, uint32_t n, const std::string& owner, const char* hint = "") {
  if (index >= 0 && index < int64_t(n)) return uint32_t(index);
  raise_kind(PyExc_ValueError, std::string(what) + " " + std::to_string(index) + " does not exist: " + owner + " has " +
                                   std::to_string(n) + " " + what + "s" +
                                   (n ? " (0.." + std::to_string(n - 1) + ")" : std::string(" (none)")) + hint);
}

// A streamer's or fetcher's owner, refused (ValueError naming `fix`) once its Python object was closed.
template <class P>
P& live(const std::shared_ptr<P>& p, const char* what, const char* fix) {
  if (!p || !p->open) raise_kind(PyExc_ValueError, std::string("this ") + what + " is closed; " + fix);
  return *p;
}

}  // namespace gpunvme::python

#endif  // GPUNVME_RUNTIME_PYTHON_RUNTIME_HANDLES_H
