// Can this GPU write a PCIe device's registers (the NVMe doorbells in BAR0)? The GPU maps a BAR
// through cudaHostRegister(..., cudaHostRegisterIoMemory | cudaHostRegisterMapped). NVIDIA documents
// that flag for Linux only (non cache-coherent, physically contiguous memory, may fail for an
// unprivileged user or on old kernels); GeForce cards are not GPUDirect RDMA devices and are expected
// to refuse, and registering a BAR on a GeForce Blackwell card is reported to take the GPU down.
// This file holds the facts about the GPU, the table that judges them, and the one function that
// registers a BAR (used by the VFIO transport and, for tests, by the emulator). docs/hardware.md
// lists the sources.
#pragma once
#include <cstdint>
#include <string>

namespace gpunvme::host {

struct GpuFacts {
  bool present = false;
  std::string absent_why;       // when !present: no CUDA build, no GPU, driver error
  int index = 0;
  std::string name;             // "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"
  int cc_major = 0, cc_minor = 0;
  int cuda_driver_version = 0;  // cudaDriverGetVersion, e.g. 12080
  std::string pci_bdf;          // 0000:65:00.0 (lower case)
  bool integrated = false;
  int host_register_supported = -1;  // cudaDevAttrHostRegisterSupported (-1: not asked)
  uint64_t memory_bytes = 0;
};

// The first (or `index`th) CUDA GPU of this process; `present` false with the reason otherwise.
// Only queries the runtime: it maps nothing and touches no device registers.
GpuFacts query_gpu(int index = 0);

enum class BarMapVerdict {
  kExpected,  // data-center / professional GPU: peer MMIO registration is expected to work
  kUnlikely,  // the driver is expected to refuse; trying is harmless, `auto` tries and falls back
  kDoNotTry,  // trying is reported to crash the GPU: gpunvme does not try unless forced
  kNoGpu,     // nothing to judge
};

struct BarMapAssessment {
  BarMapVerdict verdict = BarMapVerdict::kNoGpu;
  std::string reason;  // one sentence, with where the knowledge comes from
};

const char* verdict_name(BarMapVerdict v);  // "expected", "unlikely", "do-not-try", "no-gpu"

// The model/driver table. Pure: tests feed it fabricated facts.
BarMapAssessment assess_bar_mapping(const GpuFacts& gpu);

// The environment variable that lets a user try a kDoNotTry GPU anyway (value "force").
inline constexpr const char* kForceBarMapEnv = "GPUNVME_GPU_BAR_MAP";

// Registers [host, host + bytes) -- a BAR mapped into this process -- as I/O memory for the GPU and
// returns its GPU view, or nullptr with `why` naming the call, CUDA's error and what to do instead
// (the CPU doorbell path). `what` names the region in messages ("BAR0 of 0000:0b:00.0"). Consults
// assess_bar_mapping first and refuses a kDoNotTry GPU (unless GPUNVME_GPU_BAR_MAP=force). Leaves no
// CUDA error pending and nothing registered on failure. Without CUDA: nullptr and the reason.
volatile uint32_t* register_io_memory_for_gpu(void* host, uint64_t bytes, const std::string& what, std::string* why);
// Undoes a successful register_io_memory_for_gpu. Never throws.
void unregister_io_memory_for_gpu(void* host) noexcept;

}  // namespace gpunvme::host
