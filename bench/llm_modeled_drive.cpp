#include "bench/llm_modeled_drive.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "host/cpu_clock.h"
#include "host/emulator/controller.h"
#include "host/open_device.h"
#include "host/text/numbers.h"
#include "runtime/cli/args.h"
#include "runtime/model/stripe.h"
#if GPUNVME_HAVE_CUDA
#include <cuda_runtime.h>

#include "device/cuda_check.h"
#endif

namespace gpunvme::bench {

std::vector<std::string> emu_model_devices(const std::string& device) {
  if (!device.starts_with("emu:"))
    throw cli::UsageError("--device '" + device + "': the bench models drives on the emulator: give an emu: device");
  for (const char* key : {",drive=", ",threads="})
    if (device.find(key) != std::string::npos)
      throw cli::UsageError("--device '" + device + "': drive= and threads= are the bench's own (its --drive(s) and --queues)");
  const size_t at = device.find(",members=");
  if (!device.starts_with("emu:gen,") || at == std::string::npos || device.find(",member=") != std::string::npos) return {device};
  const std::string count = device.substr(at + 9, device.find(',', at + 9) - (at + 9));
  const uint64_t n = text::parse_u64("--device members", count);
  if (n < 1 || n > model::kMaxStripeMembers) throw cli::UsageError("--device '" + device + "': members=" + count + " is not 1..16");
  std::vector<std::string> members;
  for (uint64_t i = 1; i <= n; ++i) members.push_back(device + ",member=" + std::to_string(i));
  return members;
}

DriveControllers::DriveControllers(const std::vector<std::string>& devices, const std::string& drive, uint32_t threads,
                                   const std::string& emu_opts) {
  threads_ = host::threads_started_by([&] {
    for (const std::string& device : devices)
      owned_.push_back(host::open_controller(device + ",drive=" + drive + ",threads=" + std::to_string(threads) + (emu_opts.empty() ? "" : "," + emu_opts),
                                             {}, host::Access::kReadOnly));
  });
  for (auto& c : owned_) raw_.push_back(c.get());
}

double DriveControllers::thread_cpu_seconds() const {
  double s = 0;
  for (pid_t t : threads_) s += std::max(0.0, host::thread_cpu_seconds(t));  // an ended thread counts 0
  return s;
}

namespace {

// emu_model_devices and llm_tokens' --image give emu: devices only; a real drive has neither count nor model.
const emu::EmulatedController& emulated(host::Controller& c) {
  const auto* e = dynamic_cast<const emu::EmulatedController*>(&c.transport());
  if (!e) throw std::logic_error("DriveControllers: " + c.transport().name() + " is not an emulated controller");
  return *e;
}

}  // namespace

std::vector<uint64_t> DriveControllers::served_bytes() const {
  std::vector<uint64_t> out;
  for (const auto& c : owned_) out.push_back(emulated(*c).stats().bytes_read);
  return out;
}

const emu::DriveModel* DriveControllers::drive_model() const {
  return owned_.empty() ? nullptr : emulated(*owned_.front()).drive_model();  // every controller models the same drive
}

double DriveControllers::read_bandwidth() const {
  const emu::DriveModel* m = drive_model();
  return m ? m->params().read_bytes_per_s : 0;
}

EngineCpuTimer::EngineCpuTimer(std::vector<const DriveControllers*> drives)
    : drives_(std::move(drives)), process0_(host::process_cpu_seconds()), drives0_(drives_cpu()) {}

double EngineCpuTimer::drives_cpu() const {
  double s = 0;
  for (const DriveControllers* d : drives_) s += d ? d->thread_cpu_seconds() : 0;
  return s;
}

double EngineCpuTimer::seconds() const { return host::process_cpu_seconds() - process0_ - (drives_cpu() - drives0_); }

double measure_h2d() {
#if GPUNVME_HAVE_CUDA
  const uint64_t bytes = 256u << 20;
  void *h = nullptr, *d = nullptr;
  device::check_cuda(cudaHostAlloc(&h, bytes, cudaHostAllocDefault), "pinned memory for the H2D probe");
  device::check_cuda(cudaMalloc(&d, bytes), "GPU memory for the H2D probe");
  std::memset(h, 1, bytes);
  device::check_cuda(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), "H2D probe");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) device::check_cuda(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), "H2D probe");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cudaFree(d);
  cudaFreeHost(h);
  return 4.0 * bytes / s;
#else
  return 0;
#endif
}

std::string gpu_name() {
#if GPUNVME_HAVE_CUDA
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) return prop.name;
#endif
  return "";
}

}  // namespace gpunvme::bench
