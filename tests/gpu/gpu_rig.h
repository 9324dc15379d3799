// The GPU suites' rig: an emulated controller with one CPU queue pair (qid 1, for writing patterns)
// and N queue pairs handed to kernels, plus REQUIRE_GPU() that skips, with the reason, without a GPU.
#pragma once
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device/queue_set.h"
#include "gpu_check.h"
#include "host/controller.h"
#include "host/cpu_io.h"
#include "host/cuda_device.h"
#include "host/dma_memory.h"
#include "host/emulator/controller.h"
#include "host/open_device.h"

namespace gpunvme::test {

#define REQUIRE_GPU()                                                \
  do {                                                               \
    std::string why_;                                                \
    if (!host::cuda_device_available(&why_)) SKIP("no CUDA GPU: " << why_); \
  } while (0)

inline host::DmaOptions gpu_memory() {
  host::DmaOptions m;
  m.gpu_mapped = true;
  return m;
}

// A controller with one CPU queue (qid 1, for writing patterns) and `gpu_queues` queues handed to kernels.
struct GpuRig {
  emu::EmulatedController* emu = nullptr;
  std::unique_ptr<host::Controller> ctrl;
  std::unique_ptr<host::QueuePair> cpu_qp;
  std::unique_ptr<host::CpuIo> cpu;
  std::vector<std::unique_ptr<host::QueuePair>> gpu_qps;
  std::vector<host::QueuePair*> raw;  // gpu_qps as plain pointers
  std::unique_ptr<device::DeviceQueueSet> set;
  uint32_t lba = 0;

  GpuRig(const std::string& dev, uint32_t gpu_queues, uint32_t entries, bool cpu_queue = true,
         device::DeviceQueueOptions o = {}, bool device_set = true) {
    auto t = host::open_transport(dev);
    emu = dynamic_cast<emu::EmulatedController*>(t.get());
    REQUIRE(emu != nullptr);
    ctrl = std::make_unique<host::Controller>(std::move(t));
    uint16_t qid = 1;
    if (cpu_queue) {
      cpu_qp = ctrl->create_io_queue_pair(qid++, 64);
      cpu = std::make_unique<host::CpuIo>(*ctrl, *cpu_qp, 1, host::CpuIoOptions{.queue_depth = 32});
    }
    for (uint32_t i = 0; i < gpu_queues; ++i) {
      gpu_qps.push_back(ctrl->create_io_queue_pair(qid++, entries, gpu_memory()));
      raw.push_back(gpu_qps.back().get());
    }
    // Without device_set the GPU queue pairs are left for a stream::GpuSubmitter to take.
    if (device_set) set = std::make_unique<device::DeviceQueueSet>(*ctrl, raw, 1, o);
    lba = ctrl->namespace_info(1).lba_bytes;
  }
  host::DmaBuffer gpu_buffer(uint64_t bytes) {
    host::DmaBuffer b(ctrl->transport(), bytes, gpu_memory());
    std::memset(b.host(), 0xEE, b.size());
    return b;
  }
  // Writes the pattern over [ns_offset, ns_offset + bytes) through the CPU path.
  void write_pattern(uint64_t ns_offset, uint64_t bytes, uint64_t seed) {
    host::DmaBuffer stage(ctrl->transport(), 1 << 20);
    for (uint64_t done = 0; done < bytes; done += 1 << 20) {
      const uint64_t n = std::min<uint64_t>(1 << 20, bytes - done);
      test::fill_ns_pattern(stage.as<uint8_t>(), n, ns_offset + done, seed);
      cpu->write((ns_offset + done) / lba, n / lba, stage, 0);
    }
  }
};

}  // namespace gpunvme::test
