// GPU checks: what CUDA reports, the NVIDIA driver version, BAR1 size, and whether the GPU is expected
// to map the NVMe BAR (judged from the table in host/gpu_bar_access.cpp; nothing is mapped here).
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "runtime/doctor/checks.h"

namespace gpunvme::doctor {
namespace {

// "550.54.14" and whether the open kernel modules are loaded, from /proc/driver/nvidia/version.
std::pair<std::string, bool> nvidia_driver(const Tree& tree) {
  const std::string text = tree.read("/proc/driver/nvidia/version").value_or("");
  const std::string first = text.substr(0, text.find('\n'));
  std::istringstream words(first);
  std::string w, version;
  while (words >> w)
    if (version.empty() && !w.empty() && std::isdigit(uint8_t(w[0])) && w.find('.') != std::string::npos) version = w;
  return {version, first.find("Open Kernel Module") != std::string::npos};
}

// Size of BAR `index` from the sysfs `resource` file (one "start end flags" line per BAR), 0 if unset.
uint64_t bar_size(const Tree& tree, const std::string& bdf, int index) {
  std::istringstream in(tree.read(pci_dir(bdf) + "/resource").value_or(""));
  std::string line;
  for (int i = 0; std::getline(in, line); ++i) {
    if (i != index) continue;
    std::istringstream f(line);
    std::string a, b;
    f >> a >> b;
    const uint64_t start = std::strtoull(a.c_str(), nullptr, 16), end = std::strtoull(b.c_str(), nullptr, 16);
    return end > start ? end - start + 1 : 0;
  }
  return 0;
}

}  // namespace

Check check_gpu(Context& c) {
  Check k{"gpu", Severity::kOk, "", "", {}};
  const host::GpuFacts& g = c.env.gpu;
  const auto [driver, open_modules] = nvidia_driver(c.tree);
  if (!g.present) {
    k.severity = Severity::kWarn;
    k.summary = "no GPU for GPU-initiated I/O: " + g.absent_why + "; every CPU path still works";
    k.fix = driver.empty() ? "install the NVIDIA driver and a CUDA toolkit (12 or newer), then rebuild with "
                             "-Dcuda=enabled"
                           : "NVIDIA driver " + driver + " is loaded: rebuild gpunvme with -Dcuda=enabled";
    k.facts = {{"present", "false"}, {"why", g.absent_why}, {"nvidia_driver", driver}};
    return k;
  }
  const uint64_t bar1 = g.pci_bdf.empty() ? 0 : bar_size(c.tree, g.pci_bdf, 1);
  const std::string cc = std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor);
  k.facts = {{"present", "true"},
             {"name", g.name},
             {"compute_capability", cc},
             {"pci_bdf", g.pci_bdf},
             {"nvidia_driver", driver},
             {"open_kernel_modules", open_modules ? "true" : "false"},
             {"cuda_driver_version", std::to_string(g.cuda_driver_version)},
             {"bar1_bytes", std::to_string(bar1)},
             {"memory_bytes", std::to_string(g.memory_bytes)}};
  k.summary = g.name + " (sm_" + std::to_string(g.cc_major) + std::to_string(g.cc_minor) + ", " + g.pci_bdf +
              (driver.empty() ? "" : ", driver " + driver + (open_modules ? " open" : "")) +
              (bar1 ? ", BAR1 " + mib(bar1) : "") + ")";
  if (g.cc_major < 7) {
    k.severity = Severity::kFail;
    k.summary += ": GPU-initiated I/O needs compute capability 7.0 or newer";
    k.fix = "use a Volta or newer GPU (gpunvme builds for sm_90 by default)";
  } else if (bar1 != 0 && bar1 <= (256ull << 20)) {
    k.severity = Severity::kInfo;
    k.summary += "; BAR1 is 256 MiB: Resizable BAR is off (gpunvme's DMA targets host memory, so only "
                 "GPU-memory targets would need it)";
    k.fix = "optional: enable Above 4G Decoding and Resizable BAR in the firmware";
  }
  return k;
}

Check check_gpu_bar_map(Context& c) {
  Check k{"gpu_bar_map", Severity::kOk, "", "", {}};
  const host::BarMapAssessment a = host::assess_bar_mapping(c.env.gpu);
  k.facts = {{"verdict", host::verdict_name(a.verdict)}, {"reason", a.reason}, {"probed", "false"}};
  k.summary = std::string("cudaHostRegisterIoMemory for the NVMe BAR: ") + host::verdict_name(a.verdict) + ": " +
              a.reason + " (judged from the model and driver; doctor maps no BAR)";
  switch (a.verdict) {
    case host::BarMapVerdict::kExpected:
      return k;
    case host::BarMapVerdict::kNoGpu:
      k.severity = Severity::kInfo;
      k.summary = "GPU doorbells not applicable: no GPU";
      return k;
    case host::BarMapVerdict::kUnlikely:
    case host::BarMapVerdict::kDoNotTry:
      k.severity = Severity::kWarn;
      k.fix = "nothing blocks: doorbell=auto (the default) uses CPU doorbells -- kernels still build SQEs and reap "
              "CQEs, a host thread forwards the doorbells (higher QD1 latency); for GPU-written doorbells use a "
              "data-center or professional GPU";
      return k;
  }
  return k;
}

}  // namespace gpunvme::doctor
