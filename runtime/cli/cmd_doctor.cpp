#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "host/gpu_bar_access.h"
#include "host/vfio/sysfs_pci.h"
#include "runtime/cli/args.h"
#include "runtime/cli/commands.h"
#include "runtime/doctor/doctor.h"

namespace gpunvme::cli {

static const Help kDoctorHelp = {
    "usage: gpunvme doctor [--device vfio:BDF] [--json] [--queues N] [--entries N] [--buffers SIZE] [--gpu N]\n"
    "\n"
    "Checks this machine for running gpunvme on a real NVMe drive and GPU, and prints the exact fix for\n"
    "each problem: IOMMU (on, mode), VFIO modules, no-IOMMU mode, locked-memory limit against what the\n"
    "queues and buffers pin, hugepages, the NVMe controllers present; with --device also the drive's\n"
    "driver, IOMMU group and its other members, /dev/vfio access, PCIe link and NUMA node next to the\n"
    "GPU; then the GPU (model, driver, BAR1) and whether it is expected to map the NVMe BAR for\n"
    "GPU-written doorbells (doorbell=auto falls back to CPU-forwarded doorbells where not). It only\n"
    "reads sysfs, procfs and the CUDA runtime: it opens no device and maps or writes no registers.\n"
    "\n"
    "  --device vfio:BDF  the drive to check, e.g. vfio:0000:0b:00.0 (without it: the machine only)\n"
    "  --json             one JSON object (attach it to a bug report: docs/hardware.md)\n"
    "  --queues N         I/O queues to budget locked memory for (default 8)\n"
    "  --entries N        entries per queue (default 1024)\n"
    "  --buffers SIZE     DMA buffers to budget for (default 256M)\n"
    "  --gpu N            the CUDA device to judge (default 0)\n"
    "\n"
    "exit status:\n"
    "  0  ready: nothing blocks gpunvme here\n"
    "  1  at least one problem blocks it (each FAIL line names its fix)\n"
    "  2  usage error\n"
    "  3  ready, with warnings (e.g. no GPU, CPU-forwarded doorbells, drive and GPU on different sockets)\n",
    ""};

int cmd_doctor(int argc, char** argv) {
  Args args(argc, argv, 2, {"device", "queues", "entries", "buffers", "gpu"}, {"json"});
  if (args.help_asked()) return args.print_help("gpunvme doctor", kDoctorHelp);
  if (!args.positional().empty()) throw UsageError("unexpected argument '" + args.positional()[0] + "' (see --help)");
  doctor::Environment env;
  env.device = args.get("device");
  if (env.device.rfind("emu:", 0) == 0)
    throw UsageError("doctor checks real drives (--device vfio:BDF); the emulated controller needs no set-up");
  if (!env.device.empty() &&
      !vfio::normalize_bdf(env.device.rfind("vfio:", 0) == 0 ? env.device.substr(5) : env.device))
    throw UsageError("--device '" + env.device + "' is not a PCI address: use vfio:DOMAIN:BUS:DEV.FN, e.g. "
                     "vfio:0000:0b:00.0 (scripts/setup_vfio.sh status lists the drives)");
  // Only the tests point the checks at a fabricated tree.
  if (const char* root = std::getenv("GPUNVME_DOCTOR_ROOT")) env.root = root;
  env.euid = uint32_t(::geteuid());
  env.queues = args.get_u32("queues", env.queues);
  env.entries = args.get_u32("entries", env.entries);
  env.buffer_bytes = args.get_size("buffers", env.buffer_bytes);
  if (env.queues == 0 || env.entries < 2) throw UsageError("--queues must be at least 1 and --entries at least 2");
  env.gpu = host::query_gpu(int(args.get_u32("gpu", 0)));
  const doctor::Report report = doctor::run_checks(env);
  const std::string out = args.has("json") ? doctor::render_json(report, env) : doctor::render_text(report);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return report.exit_status();
}

}  // namespace gpunvme::cli
