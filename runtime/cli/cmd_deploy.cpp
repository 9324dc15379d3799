// `gpunvme deploy`: a GGUF model onto a raw namespace through our own driver, with the deploy
// record (runtime/deploy/deploy.h); or the dd route: --print-dd, then --record-only.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "host/open_device.h"
#include "runtime/cli/args.h"
#include "runtime/cli/commands.h"
#include "runtime/cli/format.h"
#include "runtime/deploy/deploy.h"
#include "runtime/gguf/gguf_file.h"

namespace gpunvme::cli {
namespace {

const char* kDeployHelp =
    "usage: gpunvme deploy MODEL.gguf --device DEVICE [--start-lba N] [--nsid N] [--force] [--progress]\n"
    "       gpunvme deploy MODEL.gguf --device DEVICE --print-dd [--start-lba N]\n"
    "       gpunvme deploy MODEL.gguf --device DEVICE --record-only [--start-lba N]\n"
    "\n"
    "Writes a GGUF model onto a raw NVMe namespace through gpunvme's own driver (CPU-initiated\n"
    "writes, 8 MiB pieces, the file read overlapping the previous write), then a one-block deploy\n"
    "record at LBA 0: model name, start LBA, byte length, block size and a CRC-32C per 64 MiB chunk\n"
    "(computed while writing). `gpunvme ls` and `gpunvme verify` then need nothing but the device.\n"
    "\n"
    "Before writing anything it parses the GGUF header, checks that the model fits, and refuses to\n"
    "write over a partition table (MBR, GPT) or a filesystem/swap/LUKS/LVM signature found at LBA 0\n"
    "or at the start LBA. A previously deployed model is replaced without asking.\n"
    "\n"
    "  --device DEVICE   the namespace to write (required). WARNING: this overwrites it.\n"
    "  --nsid N          namespace id (default 1)\n"
    "  --start-lba N     LBA of the model's byte 0 (default: 1 MiB in: LBA 2048 with 512-byte\n"
    "                    blocks, 256 with 4 KiB blocks). LBA 0 holds the record, so N >= 1.\n"
    "  --force           write even over a partition table or filesystem signature\n"
    "  --progress        show the progress line (bytes, rate, ETA) even when stderr is not a terminal\n"
    "  --print-dd        write nothing; print the dd command that puts the file where deploy would,\n"
    "                    and the --record-only step to run after it\n"
    "  --record-only     the model bytes are already on the device (dd): checksum the file and write\n"
    "                    only the deploy record (refused if the device's first model block differs)\n"
    "\n"
    "example (emulated controller on a file, no hardware, no root):\n"
    "  gpunvme deploy model.gguf --device emu:/tmp/models.img,size=1G\n"
    "  gpunvme ls --device emu:/tmp/models.img\n"
    "  gpunvme verify --device emu:/tmp/models.img\n"
    "\n";

// For emu:PATH devices the image file itself is the dd target.
std::string emu_image_path(const std::string& device) {
  if (device.rfind("emu:", 0) != 0) return "";
  std::string p = device.substr(4, device.find(',') == std::string::npos ? std::string::npos : device.find(',') - 4);
  return (p == "ram" || p == "null" || p.empty()) ? "" : p;
}

std::string lba_range(uint64_t first, uint64_t end) {
  return std::to_string(first) + ".." + std::to_string(end - 1);
}

}  // namespace

int cmd_deploy(int argc, char** argv) {
  Args args(argc, argv, 2, {"device", "start-lba", "nsid"}, {"help", "force", "progress", "print-dd", "record-only"});
  if (args.has("help")) {
    std::printf("%s%s", kDeployHelp, host::device_string_help());
    return 0;
  }
  if (args.positional().size() != 1) {
    throw UsageError(args.positional().empty() ? "which model? usage: gpunvme deploy MODEL.gguf --device DEVICE (see --help)"
                                               : "one model at a time: got " + std::to_string(args.positional().size()) +
                                                     " file arguments (see --help)");
  }
  const std::string path = args.positional()[0];
  if (!args.has("device")) {
    throw UsageError("--device is required, e.g. --device emu:/tmp/models.img,size=1G (emulated) or --device "
                     "vfio:0000:01:00.0 (see --help)");
  }
  if (args.has("print-dd") && args.has("record-only")) throw UsageError("--print-dd and --record-only exclude each other");
  const std::string device = args.get("device");
  const auto nsid = uint32_t(args.get_u64("nsid", 1));
  std::optional<uint64_t> start;
  if (args.has("start-lba")) start = args.get_u64("start-lba", 0);

  // Header first: a file that is not a GGUF is reported before any device is touched.
  const auto file = gguf::GgufFile::open(path);
  deploy::Device dev(device, nsid);
  const uint64_t start_lba = start.value_or(model::default_model_start_lba(dev.lba_size()));

  if (args.has("print-dd")) {
    deploy::check_fit(file.file_size(), nsid, dev.lba_size(), dev.n_lbas(), start_lba);
    const std::string image = emu_image_path(device);
    auto plan = deploy::dd_plan(path, dev.lba_size(), start_lba, image.empty() ? "/dev/nvmeXnY" : image);
    if (!image.empty()) {
      const auto pos = plan.command.find("conv=fsync");
      plan.command.replace(pos, 10, "conv=fsync,notrunc");  // a regular file: keep the bytes after the model
    }
    std::printf("# %s: %s, %s into %s (LBA %s of %u-byte blocks)\n", path.c_str(), printable(file.model_name()).c_str(),
                human_bytes(double(file.file_size())).c_str(), dev.name().c_str(),
                lba_range(start_lba, start_lba + (file.file_size() + dev.lba_size() - 1) / dev.lba_size()).c_str(),
                dev.lba_size());
    if (image.empty()) {
      std::printf(
          "# 1. write the bytes with dd. Replace /dev/nvmeXnY with the kernel's name for this namespace\n"
          "#    (`nvme list` or `lsblk -o NAME,SIZE,MODEL,SERIAL`); for this step the drive is bound to the\n"
          "#    kernel nvme driver, not vfio-pci. Check the name twice: dd overwrites without asking.\n");
    } else {
      std::printf("# 1. write the bytes with dd into the emulator's image file (notrunc keeps the rest of it)\n");
    }
    std::printf("#    seek=%llu blocks of bs=%llu bytes = byte %llu = LBA %llu.\n", (unsigned long long)plan.seek,
                (unsigned long long)plan.bs, (unsigned long long)(plan.seek * plan.bs),
                (unsigned long long)start_lba);
    std::printf("%s\n", plan.command.c_str());
    std::printf("# 2. add the deploy record (checksums from the file; the drive back on vfio-pci for vfio:):\n");
    std::string step2 = "gpunvme deploy " + path + " --device " + device + " --record-only";
    if (start) step2 += " --start-lba " + std::to_string(*start);
    if (nsid != 1) step2 += " --nsid " + std::to_string(nsid);
    std::printf("%s\n", step2.c_str());
    std::printf("# 3. check every byte:\ngpunvme verify --device %s\n", device.c_str());
    return 0;
  }

  deploy::DeployOptions opt;
  opt.start_lba = start;
  opt.force = args.has("force");
  opt.record_only = args.has("record-only");
  deploy::ProgressLine bar("deploy", !opt.record_only && (args.has("progress") || isatty(2)));
  opt.progress = bar.fn();
  const auto res = deploy::deploy_model(dev, path, opt);
  bar.finish();
  for (const auto& s : res.overridden) {
    std::fprintf(stderr, "gpunvme deploy: --force: wrote over %s at LBA %llu\n", s.what.c_str(),
                 (unsigned long long)s.lba);
  }
  const auto& r = res.record;
  if (opt.record_only) {
    std::printf("wrote the deploy record for '%s' (%s at LBA %s) to LBA %llu of %s: %llu chunk CRCs of %s\n",
                printable(r.name).c_str(), human_bytes(double(r.model_bytes)).c_str(),
                lba_range(r.model_start_lba, r.model_end_lba()).c_str(), (unsigned long long)r.record_lba,
                dev.name().c_str(), (unsigned long long)r.n_chunks(), human_bytes(double(r.chunk_bytes())).c_str());
    std::printf("the record's checksums come from the file: run `gpunvme verify --device %s` to check the device\n",
                device.c_str());
  } else {
    std::printf("deployed '%s': %s to %s LBA %s in %.2f s (%s); record at LBA %llu with %llu chunk CRCs of %s\n",
                printable(r.name).c_str(), human_bytes(double(r.model_bytes)).c_str(), dev.name().c_str(),
                lba_range(r.model_start_lba, r.model_end_lba()).c_str(), res.seconds,
                deploy::rate_string(res.seconds > 0 ? double(r.model_bytes) / res.seconds : 0).c_str(),
                (unsigned long long)r.record_lba, (unsigned long long)r.n_chunks(),
                human_bytes(double(r.chunk_bytes())).c_str());
  }
  return 0;
}

}  // namespace gpunvme::cli
