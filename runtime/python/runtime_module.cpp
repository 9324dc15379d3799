// gpunvme._runtime: the runtime's layer streamer and expert fetcher for engine authors who write Python,
// bound with nanobind over the C API (runtime/capi/gpunvme.h, which wraps runtime/stream): its checks,
// error messages and thread rules hold here as they do for C users. What this layer adds: Python objects
// that free their handles in the C API's order whatever Python frees first (runtime_handles.h), zero-copy
// read-only memoryviews of slot and scratchpad bytes and GPU addresses of both, waits with the caller's
// timeout, and checks of layer and expert ids that name the model's range. The objects: runtime_device.h,
// runtime_streamer.h, runtime_fetcher.h; this file binds them. gpunvme/runtime.py is the documented face.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "runtime/python/runtime_device.h"
#include "runtime/python/runtime_fetcher.h"
#include "runtime/python/runtime_handles.h"
#include "runtime/python/runtime_streamer.h"

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
