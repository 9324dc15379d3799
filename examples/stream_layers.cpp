// Streams every layer of a model through double buffering with a toy compute step, and checks
// every byte against the GGUF file.
//
//   stream_layers [--device emu:ram,size=256M,lba=4096] [--gguf model.gguf [--deployed]]
//                 [--layers 24] [--mb-per-layer 4] [--slots 2] [--pump] [--path auto|gpu|cpu]
//
// --path gpu (the default where a GPU is present): a GpuSubmitter's kernels issue each layer's reads
// on an I/O stream, the toy compute kernel (a checksum of every tensor, read by the GPU straight from
// the slot) runs on a compute stream that waits only for its own layer, and the host just enqueues.
// --path cpu: the CPU submitter, and the toy compute on the CPU.
//
// Without --gguf a generated model is written onto the namespace first. With --gguf the file is
// written at the 1 MiB default unless --deployed says it is there already (e.g. an emu: image file
// onto which it was dd'ed with bs=1M seek=1). Either way the layout is then found from the device
// alone: detect_model, the GGUF header read through the driver, the tensor -> LBA map.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "example_model.h"
#include "host/error.h"
#include "host/locked_open.h"
#include "host/text/escape.h"
#include "runtime/cli/args.h"
#include "runtime/plan/command_plan.h"
#include "runtime/stream/cpu_submitter.h"
#include "runtime/stream/layer_streamer.h"
#if GPUNVME_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "gpu_toys.h"
#include "runtime/stream/gpu_queues.h"
#include "runtime/stream/gpu_submitter.h"
#endif

using namespace gpunvme;

namespace {
const cli::Help kHelp = {
    std::string("usage: stream_layers [--device DEV] [--gguf FILE [--deployed]] [--layers N] [--mb-per-layer MB]\n"
                "                     [--slots N] [--pump] [--path auto|gpu|cpu] [--allow-write] [--force]\n"
                "\n"
                "Streams every layer of a model through double buffering with a toy compute step (a checksum of\n"
                "every tensor) and checks every byte against the GGUF file. Without --gguf a generated model is\n"
                "written onto the namespace first; either way the layout is then found from the device alone.\n"
                "\n"
                "  --device DEV        default emu:ram,size=256M,lba=4096\n"
                "  --gguf FILE         a real model, written at 1 MiB first unless --deployed says it is there\n"
                "  --layers N          generated model: layers (default 24)\n"
                "  --mb-per-layer MB   generated model: MB per layer (default 4)\n"
                "  --slots N           streaming slots (default 2)\n"
                "  --pump              CPU path: the submitter's own pump thread reaps completions\n"
                "  --path auto|gpu|cpu gpu (default where a GPU is present): kernels issue each layer's reads and\n"
                "                      the toy compute waits only for its own layer; cpu: the CPU submitter\n") +
        guard::kWriteFlagsHelp,
    std::string("\n") + host::device_string_help()};

#if GPUNVME_HAVE_CUDA
// The GPU path: returns the number of mismatching tensors (or throws).
uint64_t stream_on_gpu(host::Controller& ctrl, const example::OnDevice& m, const std::vector<uint8_t>& file,
                       uint32_t slots, uint64_t* tensors) {
  stream::GpuQueues q(ctrl, 2, 4, 256);
  stream::GpuSubmitter gpu(ctrl, q.raw, 1);
  stream::LayerStreamer s(ctrl, gpu, plan::layer_extents(*m.map), {.slots = slots});
  std::printf("GPU path: %zu queues driven by GPU warps; slots GPU mapped; plans %.2f MB of templates on the GPU\n",
              q.raw.size(), s.template_bytes() / 1e6);
  const uint32_t L = s.layer_count();
  // Every layer's tensors (slot offsets) and their checksums computed from the file.
  std::vector<std::vector<example::ToyTensor>> toys(L);
  std::vector<uint64_t> expected;
  std::vector<uint32_t> first(L + 1, 0);
  for (uint32_t l = 0; l < L; ++l) {
    const model::LayerExtent* le = m.map->layer(l);
    for (size_t ti : le ? le->tensors : std::vector<size_t>{}) {
      const auto& t = m.map->tensors()[ti];
      const auto at = s.plan(l, 0).locate(t.extent.first_lba * m.map->lba_size() + t.extent.byte_in_first, m.map->lba_size());
      if (!at) throw std::runtime_error("tensor " + t.tensor->name + " is not in layer " + std::to_string(l) + "'s plan");
      toys[l].push_back({*at, t.tensor->size_bytes});
      expected.push_back(example::toy_checksum(file.data() + t.tensor->file_offset, t.tensor->size_bytes));
    }
    first[l + 1] = first[l] + uint32_t(toys[l].size());
  }
  std::vector<example::ToyTensor> all;
  for (const auto& v : toys) all.insert(all.end(), v.begin(), v.end());
  example::DeviceVec<example::ToyTensor> d_toys(all);
  example::DeviceVec<uint64_t> sums(all.size());
  cudaStream_t io = nullptr, compute = nullptr;
  int lo = 0, hi = 0;
  cudaDeviceGetStreamPriorityRange(&lo, &hi);
  cudaStreamCreateWithPriority(&io, cudaStreamNonBlocking, hi);
  cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking);
  auto sio = reinterpret_cast<stream::cuda_stream_t>(io), scomp = reinterpret_cast<stream::cuda_stream_t>(compute);
  for (uint32_t k = 0; k < std::min(slots, L); ++k) s.begin(k, k, sio);
  for (uint32_t l = 0; l < L; ++l) {
    const uint32_t slot = l % slots;
    const stream::SlotView v = s.wait(slot, scomp);  // returns at once: `compute` waits on the GPU
    example::enqueue_layer_checksums(scomp, static_cast<const uint8_t*>(v.device), d_toys.p + first[l],
                                     first[l + 1] - first[l], sums.p + first[l]);
    s.release(slot, scomp);
    if (l + slots < L) s.begin(l + slots, slot, sio);  // waits (on `io`) for the checksum kernel above
  }
  s.sync();
  cudaStreamSynchronize(compute);
  const std::vector<uint64_t> got = sums.get();
  cudaStreamDestroy(io);
  cudaStreamDestroy(compute);
  uint64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i] != expected[i];
  *tensors = got.size();
  const auto& st = s.stats();
  std::printf("streamed %u layers, %.1f MB in %.3f s (%.2f GB/s); the compute stream stalled %.3f ms for I/O; mean layer I/O %.2f ms (GPU clock)\n",
              L, st.bytes / 1e6, st.elapsed_seconds, st.gb_per_s(), st.wait_seconds * 1e3,
              st.layers ? st.io_seconds * 1e3 / st.layers : 0.0);
  return bad;
}
#endif
}  // namespace

int main(int argc, char** argv) {
  std::string device, gguf_path;
  guard::WritePermission permission;
  bool deployed = false, pump = false;
  std::string path;
  uint32_t layers = 0, slots = 0;
  double mb = 0;
  try {
    const cli::Args args(argc, argv, 1, {"device", "gguf", "layers", "mb-per-layer", "slots", "path"},
                         {"deployed", "pump", "allow-write", "force"});
    if (args.help_asked()) return args.print_help("stream_layers", kHelp);
    if (!args.positional().empty())
      throw cli::UsageError("unexpected argument '" + args.positional().front() + "' (see --help)");
    device = args.get("device", "emu:ram,size=256M,lba=4096");
    gguf_path = args.get("gguf");
    deployed = args.has("deployed");
    permission = {args.has("allow-write"), args.has("force")};
    pump = args.has("pump");
    layers = args.get_u32("layers", 24);
    mb = args.get_double("mb-per-layer", 4);
    slots = args.get_u32("slots", 2);
    if (layers == 0 || layers > 100000) throw cli::UsageError("--layers must be 1..100000");
    if (slots == 0) throw cli::UsageError("--slots must be at least 1");
    path = args.get("path", "auto");
  } catch (const cli::UsageError& e) {
    cli::print_usage_error("stream_layers", e, kHelp);
    return 2;
  }
  try {
    if (!deployed) guard::check_write_allowed(device, permission, example::kWhatWeWrite);
    auto ctrl = host::open_for(/*writes=*/!deployed, device);  // under the lock deploy takes (host/locked_open.h)
    auto qp = ctrl->create_io_queue_pair(1, std::min<uint32_t>(256, ctrl->max_queue_entries()));
    const std::vector<uint8_t> file = gguf_path.empty() ? example::dense_model(layers, mb) : example::read_file(gguf_path);
    const auto t0 = std::chrono::steady_clock::now();
    example::OnDevice m = example::put_and_find(*ctrl, *qp, file, deployed, permission);
    std::printf("model: %s (%s), %.1f MB, found on %s: %s\n", text::printable(m.file->model_name()).c_str(),
                text::printable(m.file->architecture()).c_str(), file.size() / 1e6,
                text::printable(ctrl->transport().name()).c_str(), text::printable(m.detected.describe()).c_str());

    if (example::use_gpu_path(path)) {
#if GPUNVME_HAVE_CUDA
      uint64_t tensors = 0;
      const uint64_t bad = stream_on_gpu(*ctrl, m, file, slots, &tensors);
      std::printf("verified %llu tensors on the GPU against the file's checksums: %llu mismatches\n",
                  (unsigned long long)tensors, (unsigned long long)bad);
      std::printf(bad == 0 && tensors > 0 ? "OK\n" : "FAIL\n");
      return bad == 0 && tensors > 0 ? 0 : 1;
#endif
    }
    stream::CpuSubmitter sub(*ctrl, *qp, {.pump_thread = pump});
    const auto p0 = std::chrono::steady_clock::now();
    stream::LayerStreamer s(*ctrl, sub, plan::layer_extents(*m.map), {.slots = slots});
    const double plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count();
    std::printf("streamer set up in %.2f ms (slots in DMA memory, GPU mapped when a GPU is present; PRP lists; plans for %u layers x %u slots); slot %.2f MB, PRP lists %llu B, templates %llu B\n",
                plan_ms, s.layer_count(), s.slot_count(), s.slot_bytes() / 1e6, (unsigned long long)s.prp_bytes(),
                (unsigned long long)s.template_bytes());
    (void)t0;

    const uint32_t L = s.layer_count();
    uint64_t bad_tensors = 0, tensors = 0, checksum = 0;
    for (uint32_t k = 0; k < std::min(slots, L); ++k) s.begin(k, k);
    for (uint32_t l = 0; l < L; ++l) {
      const uint32_t slot = l % slots;
      const stream::SlotView v = s.wait(slot);
      // Toy compute: a checksum over every tensor of the layer, found through the plan.
      const model::LayerExtent* le = m.map->layer(l);
      for (size_t ti : le ? le->tensors : std::vector<size_t>{}) {
        const auto& t = m.map->tensors()[ti];
        const auto at = v.plan->locate(t.extent.first_lba * m.map->lba_size() + t.extent.byte_in_first, m.map->lba_size());
        ++tensors;
        if (!at || std::memcmp(v.host + *at, file.data() + t.tensor->file_offset, t.tensor->size_bytes) != 0) {
          ++bad_tensors;
          std::fprintf(stderr, "MISMATCH: layer %u tensor %s\n", l, t.tensor->name.c_str());
          continue;
        }
        for (uint64_t i = 0; i < t.tensor->size_bytes; i += 64) checksum = checksum * 31 + v.host[*at + i];
      }
      s.release(slot);
      if (l + slots < L) s.begin(l + slots, slot);
    }
    const auto& st = s.stats();
    std::printf("streamed %u layers, %.1f MB in %.3f s (%.2f GB/s); waited %.3f s for I/O; mean layer I/O %.2f ms\n", L,
                st.bytes / 1e6, st.elapsed_seconds, st.gb_per_s(), st.wait_seconds,
                st.layers ? st.io_seconds * 1e3 / st.layers : 0.0);
    std::printf("verified %llu tensors against the file: %llu mismatches (toy checksum %016llx)\n",
                (unsigned long long)tensors, (unsigned long long)bad_tensors, (unsigned long long)checksum);
    ctrl->delete_io_queue_pair(*qp);
    if (bad_tensors != 0 || tensors == 0) {
      std::printf("FAIL\n");
      return 1;
    }
    std::printf("OK\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stream_layers: %s\n", e.what());
    return 1;
  }
}
