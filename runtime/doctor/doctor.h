// gpunvme doctor: checks a machine for running gpunvme on a real drive and GPU, and names the exact fix
// for each problem. Everything comes from files under one root (sysfs, procfs, /dev), so tests run the
// checks on fabricated trees; the GPU facts come from the CUDA runtime (host/gpu_bar_access.h) and are
// passed in. Nothing here opens a device, maps a BAR or writes a register.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "host/gpu_bar_access.h"

namespace gpunvme::doctor {

enum class Severity { kOk, kInfo, kWarn, kFail };
const char* severity_name(Severity s);  // "ok", "info", "warn", "fail"

struct Check {
  std::string id;       // stable key for scripts: "iommu", "vfio_driver", "memlock", ...
  Severity severity = Severity::kInfo;
  std::string summary;  // what was found, one line
  std::string fix;      // the exact command or setting that fixes it ("" when nothing to fix)
  std::vector<std::pair<std::string, std::string>> facts;  // machine-readable details
};

struct Environment {
  std::string root;    // prefix of /sys, /proc and /dev ("" on a real machine)
  std::string device;  // "vfio:0000:0b:00.0" (or a bare BDF), "" to check the machine only
  uint32_t euid = 0;   // whose access to /dev/vfio is judged
  host::GpuFacts gpu;  // from host::query_gpu(), or fabricated by tests
  // What the memlock check budgets for: queues x entries rings, PRP lists, and DMA buffers.
  uint32_t queues = 8;
  uint32_t entries = 1024;
  uint64_t buffer_bytes = 256ull << 20;
};

struct Report {
  std::vector<Check> checks;
  // 0: ready (all ok/info), 1: a problem blocks gpunvme on this device, 3: warnings only.
  int exit_status() const;
  const Check* find(const std::string& id) const;
};

inline constexpr int kExitReady = 0;
inline constexpr int kExitBlocked = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitWarnings = 3;

Report run_checks(const Environment& env);

std::string render_text(const Report& report);
std::string render_json(const Report& report, const Environment& env);

// Memory that gpunvme pins for env's queues and buffers (what RLIMIT_MEMLOCK must allow).
uint64_t pinned_bytes_needed(const Environment& env);

}  // namespace gpunvme::doctor
