// The gpunvme modes of bench/layer_stream (layer_stream_gpunvme.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "bench/layer_stream.h"

namespace gpunvme::bench::ls {

struct GpunvmeContext {
  const Layout* layout = nullptr;
  Consumer* consumer = nullptr;
  std::vector<std::string> devices;  // [drive] device strings, `drive=` included for modeled drives
  uint32_t gpu_queues = 4;           // I/O queues per drive driven by the GPU (gpunvme-gpu)
  uint32_t cpu_queues = 2;           // CpuSubmitters (queue + pump thread each) per drive (gpunvme-cpu)
  uint32_t queue_entries = 1024;
  uint64_t max_command_bytes = 0;    // 0: the controller's MDTS
};

std::unique_ptr<Mode> make_gpunvme_cpu_mode(const GpunvmeContext& ctx);
// Throws Unavailable in builds without CUDA or without the GPU submitter, or with no GPU.
std::unique_ptr<Mode> make_gpunvme_gpu_mode(const GpunvmeContext& ctx);

}  // namespace gpunvme::bench::ls
