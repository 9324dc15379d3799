// What the engine benchmarks (llm_tokens, llm_seqs) share: a model's emulated devices from --device,
// the modeled drive's controllers (whose threads are the drive's work, not the engine's), the host CPU
// time of the engine alone, and the host-to-GPU bandwidth that bounds the RAM tier.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "host/controller.h"
#include "host/emulator/drive_model.h"

namespace gpunvme::bench {

// --device emu:...: the namespaces of one model given whole (each cell adds drive= and threads=); a
// generated striped set, emu:gen,...,members=N without member=, stands for its N members in order.
// Throws cli::UsageError for a device that is not emu: or names drive= or threads= itself.
std::vector<std::string> emu_model_devices(const std::string& device);

// Controllers of the same namespaces modeling `drive` (the emulator's drive=), `threads` controller
// threads each, `emu_opts` (key=value,...) added: the engine streams through them. The threads they
// started are remembered so that their CPU time can be told apart from the engine's.
class DriveControllers {
 public:
  DriveControllers(const std::vector<std::string>& devices, const std::string& drive, uint32_t threads, const std::string& emu_opts = "");
  std::span<host::Controller* const> controllers() const { return raw_; }
  double thread_cpu_seconds() const;  // the drive threads' CPU time so far
  // Bytes each controller's drive has served (its reads' data: the emulator's Stats::bytes_read) since it
  // was opened, in the order of `devices`: read before and after the timed tokens, the difference is
  // what each modeled drive had to move for them (bench/served_bound.h).
  std::vector<uint64_t> served_bytes() const;
  // The drive model pacing each controller (they all model the same drive), --emu-opts overrides (bw=,
  // lat=, ...) applied; nullptr for drive none (unthrottled).
  const emu::DriveModel* drive_model() const;
  // Its rated read bandwidth (bytes/s): the rate a served byte costs at best. 0: drive none.
  double read_bandwidth() const;

 private:
  std::vector<std::unique_ptr<host::Controller>> owned_;
  std::vector<host::Controller*> raw_;
  std::vector<pid_t> threads_;
};

// The process's CPU time (user + system) from construction on, less that of the drives' threads (none:
// the whole process's). Several drives: a bench with a modeled drive per GPU (llm_tokens --drive-per-gpu),
// whose threads are each drive's work, not the engine's.
class EngineCpuTimer {
 public:
  explicit EngineCpuTimer(const DriveControllers* drive = nullptr) : EngineCpuTimer(std::vector<const DriveControllers*>{drive}) {}
  explicit EngineCpuTimer(std::vector<const DriveControllers*> drives);
  double seconds() const;

 private:
  double drives_cpu() const;
  std::vector<const DriveControllers*> drives_;
  double process0_, drives0_;
};

// Host-to-GPU copy bandwidth from pinned memory (bytes/s): the RAM tier's link. Needs a GPU (CUDA
// builds); 0 without CUDA.
double measure_h2d();
// The current GPU's name as CUDA reports it ("NVIDIA H200"); "" without CUDA or a GPU.
std::string gpu_name();

}  // namespace gpunvme::bench
