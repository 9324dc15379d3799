// `gpunvme deploy`: a GGUF model onto a raw namespace through our own driver, with the deploy
// record (runtime/deploy/deploy.h); or the dd route: --print-dd, then --record-only.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "host/open_device.h"
#include "runtime/cli/args.h"
#include "runtime/cli/commands.h"
#include "runtime/cli/format.h"
#include "runtime/deploy/deploy.h"
#include "runtime/deploy/model_file.h"
#include "runtime/deploy/shell_quote.h"
#include "runtime/deploy/stop_signal.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/guard/write_guard.h"

namespace gpunvme::cli {
namespace {

Help deploy_help() {
  return {"usage: gpunvme deploy MODEL.gguf --device DEVICE [--start-lba N] [--nsid N] [--allow-write] [--force] [--progress]\n"
          "       gpunvme deploy MODEL.gguf --device DEVICE --print-dd [--start-lba N]\n"
          "       gpunvme deploy MODEL.gguf --device DEVICE --record-only [--start-lba N]\n"
          "\n"
          "Writes a GGUF model onto a raw NVMe namespace through gpunvme's own driver, then a one-block deploy\n"
          "record at LBA 0 (name, start LBA, length, block size, a CRC-32C per 64 MiB chunk), so that\n"
          "`gpunvme ls` and `gpunvme verify` need nothing but the device. It refuses to write over a partition\n"
          "table, a filesystem or other data unless --force; nothing is written before every check passed.\n"
          "\n"
          "  --device DEVICE   the namespace to write (required). WARNING: this overwrites it. Repeated: a\n"
          "                    striped set (RAID-0) over those namespaces in that order\n"
          "  --start-lba N     LBA of the model's byte 0 (default: 1 MiB in; LBA 0 holds the record)\n"
          "  --allow-write     required for a real device: vfio:, or emu: on a block device (/dev/...)\n"
          "  --force           write even over a partition table, filesystem signature or unknown data\n"
          "\n"
          "example (emulated controller on a file, no hardware, no root):\n"
          "  gpunvme deploy model.gguf --device emu:/tmp/models.img,size=1G\n"
          "  gpunvme ls --device emu:/tmp/models.img\n"
          "  gpunvme verify --device emu:/tmp/models.img\n",
          std::string(
              "\n"
              "The writes are CPU-initiated, in 8 MiB pieces, the file read overlapping the previous write; the\n"
              "CRC-32Cs are computed while writing.\n"
              "\n"
              "Before writing anything it parses the GGUF header, checks that the model fits, and refuses to\n"
              "write over a partition table, a filesystem or any other signature libblkid knows (ceph, ZFS,\n"
              "LVM, swap, ...), or any other non-zero data, found in the first MiB at LBA 0 or at the start\n"
              "LBA. A previously deployed model is replaced without asking when the layout stays (one\n"
              "namespace, or the same set in the same order and stripe unit); a new layout over a model (a set\n"
              "in another order or unit, a set over a one-namespace model, one model over a set member) needs\n"
              "--force. A deploy that stops midway (signal, error) leaves an unfinished record that ls and\n"
              "verify refuse; run it again. While it runs the device is locked: a second deploy, ls or verify\n"
              "is refused, naming the pid.\n"
              "\n"
              "More on the options above, and the others:\n"
              "  --device DEVICE   repeated: each member gets a stripe record at LBA 0 naming the set and its\n"
              "                    place; ls, verify and the engine then take the same --device list (a wrong\n"
              "                    order, a missing or repeated member is refused)\n"
              "  --stripe-unit SIZE  striped set: bytes per member before the next. Default: a set laid in this\n"
              "                    order keeps its unit; a new one gets the model's: a quarter of its smallest\n"
              "                    expert slice, 128K-1M (1M dense). --print-dd, --record-only: one namespace only\n"
              "  --nsid N          namespace id (default 1)\n"
              "  --start-lba N     default LBA 2048 with 512-byte blocks, 256 with 4 KiB blocks; N >= 1\n"
              "  --allow-write     the same rule as every other tool that writes (--print-dd too)\n"
              "  --progress        show the progress line (bytes, rate, ETA) even when stderr is not a terminal\n"
              "  --print-dd        write nothing; print the dd command that puts the file where deploy would,\n"
              "                    and the --record-only step to run after it (same checks, same refusals)\n"
              "  --record-only     the model bytes are already on the device (dd): checksum the file and write\n"
              "                    only the deploy record (refused if the device's first model block differs)\n"
              "\n") +
              host::device_string_help()};
}

// For emu:PATH devices the image file itself is the dd target.
std::string emu_image_path(const std::string& device) {
  if (device.rfind("emu:", 0) != 0) return "";
  std::string p = device.substr(4, device.find(',') == std::string::npos ? std::string::npos : device.find(',') - 4);
  return (p == "ram" || p == "null" || p.empty()) ? "" : p;
}

std::string lba_range(uint64_t first, uint64_t end) {
  return std::to_string(first) + ".." + std::to_string(end - 1);
}

struct DeployCommand {
  std::string path;
  std::string device;
  std::vector<std::string> devices;  // more than one: a striped set
  uint32_t nsid = 1;
  std::optional<uint64_t> start;  // as given
  bool force = false;
};

DeployCommand parse_command(const Args& args) {
  if (args.positional().size() != 1) {
    throw UsageError(args.positional().empty() ? "which model? usage: gpunvme deploy MODEL.gguf --device DEVICE (see --help)"
                                               : "one model at a time: got " + std::to_string(args.positional().size()) +
                                                     " file arguments (see --help)");
  }
  if (!args.has("device")) {
    throw UsageError("--device is required, e.g. --device emu:/tmp/models.img,size=1G (emulated) or --device "
                     "vfio:0000:01:00.0 (see --help)");
  }
  if (args.has("print-dd") && args.has("record-only")) throw UsageError("--print-dd and --record-only exclude each other");
  DeployCommand c;
  c.path = args.positional()[0];
  c.devices = args.all("device");
  c.device = c.devices.front();
  if (c.devices.size() > 1 && (args.has("print-dd") || args.has("record-only")))
    throw UsageError("a striped set (several --device) is laid out by deploy itself: dd cannot write the stripes; "
                     "drop --print-dd / --record-only");
  if (c.devices.size() > 1 && args.has("start-lba"))
    throw UsageError("--start-lba with a striped set: the model starts right after the record, 4 KiB into the set's "
                     "logical volume");
  if (args.has("stripe-unit") && c.devices.size() < 2)
    throw UsageError("--stripe-unit needs a striped set: give --device once per member (2 or more)");
  c.nsid = uint32_t(args.get_u64("nsid", 1));
  if (args.has("start-lba")) c.start = args.get_u64("start-lba", 0);
  c.force = args.has("force");
  return c;
}

// --print-dd: the same checks as a deploy (a target deploy refuses is refused here too), then the
// commands with every argument shell-quoted, names included (a GGUF's general.name is the file's).
int print_dd(const DeployCommand& c, const gguf::GgufFile& file, deploy::Device& dev) {
  const uint32_t lba = dev.lba_size();
  const uint64_t start_lba = c.start.value_or(deploy::default_start_lba(dev));
  const auto overridden = deploy::check_target(dev, file.file_size(), start_lba, false, c.force);
  const std::string image = emu_image_path(c.device);
  auto plan = deploy::dd_plan(c.path, lba, start_lba, image.empty() ? "/dev/nvmeXnY" : image);
  if (!image.empty()) {
    const auto pos = plan.command.find("conv=fsync");
    plan.command.replace(pos, 10, "conv=fsync,notrunc");  // a regular file: keep the bytes after the model
  }
  const std::string q_path = deploy::shell_quote(c.path), q_device = deploy::shell_quote(c.device);
  // A comment line: control bytes escaped (a newline in a name must not end the comment).
  std::printf("# %s: %s, %s into %s (LBA %s of %u-byte blocks)\n", printable(q_path).c_str(),
              printable(deploy::shell_quote(file.model_name())).c_str(), human_bytes(double(file.file_size())).c_str(),
              printable(deploy::shell_quote(dev.name())).c_str(),
              lba_range(start_lba, start_lba + (file.file_size() + lba - 1) / lba).c_str(), lba);
  for (const auto& s : overridden) {
    std::printf("# --force: these commands write over %s at LBA %llu\n", printable(deploy::shell_quote(s.what)).c_str(),
                (unsigned long long)s.lba);
  }
  if (image.empty()) {
    std::printf(
        "# 1. write the bytes with dd. Replace /dev/nvmeXnY with the kernel's name for this namespace\n"
        "#    (`nvme list` or `lsblk -o NAME,SIZE,MODEL,SERIAL`); for this step the drive is bound to the\n"
        "#    kernel nvme driver, not vfio-pci. Check the name twice: dd overwrites without asking.\n");
  } else {
    std::printf("# 1. write the bytes with dd into the emulator's image file (notrunc keeps the rest of it)\n");
  }
  std::printf("#    seek=%llu blocks of bs=%llu bytes = byte %llu = LBA %llu.\n", (unsigned long long)plan.seek,
              (unsigned long long)plan.bs, (unsigned long long)(plan.seek * plan.bs), (unsigned long long)start_lba);
  std::printf("%s\n", plan.command.c_str());
  std::printf("# 2. add the deploy record (checksums from the file; the drive back on vfio-pci for vfio:):\n");
  std::string step2 = "gpunvme deploy " + q_path + " --device " + q_device + " --record-only";
  if (c.start) step2 += " --start-lba " + std::to_string(*c.start);
  if (c.nsid != 1) step2 += " --nsid " + std::to_string(c.nsid);
  if (c.force) step2 += " --force";
  std::printf("%s\n", step2.c_str());
  std::printf("# 3. check every byte:\ngpunvme verify --device %s%s\n", q_device.c_str(),
              c.nsid != 1 ? (" --nsid " + std::to_string(c.nsid)).c_str() : "");
  return 0;
}

void print_summary(const deploy::DeployResult& res, bool record_only, const deploy::Device& dev, const std::string& device) {
  for (const auto& s : res.overridden) {
    std::fprintf(stderr, "gpunvme deploy: --force: wrote over %s at LBA %llu\n", s.what.c_str(), (unsigned long long)s.lba);
  }
  const auto& r = res.record;
  if (record_only) {
    std::printf("wrote the deploy record for '%s' (%s at LBA %s) to LBA %llu of %s: %llu chunk CRCs of %s\n",
                printable(r.name).c_str(), human_bytes(double(r.model_bytes)).c_str(),
                lba_range(r.model_start_lba, r.model_end_lba()).c_str(), (unsigned long long)r.record_lba,
                dev.name().c_str(), (unsigned long long)r.n_chunks(), human_bytes(double(r.chunk_bytes())).c_str());
    std::printf("the record's checksums come from the file: run `gpunvme verify --device %s` to check the device\n",
                deploy::shell_quote(device).c_str());
    return;
  }
  std::printf("deployed '%s': %s to %s LBA %s in %.2f s (%s); record at LBA %llu with %llu chunk CRCs of %s\n",
              printable(r.name).c_str(), human_bytes(double(r.model_bytes)).c_str(), dev.name().c_str(),
              lba_range(r.model_start_lba, r.model_end_lba()).c_str(), res.seconds,
              deploy::rate_string(res.seconds > 0 ? double(r.model_bytes) / res.seconds : 0).c_str(),
              (unsigned long long)r.record_lba, (unsigned long long)r.n_chunks(),
              human_bytes(double(r.chunk_bytes())).c_str());
}

}  // namespace

int cmd_deploy(int argc, char** argv) {
  Args args(argc, argv, 2, {"device", "start-lba", "nsid", "stripe-unit"},
            {"allow-write", "force", "progress", "print-dd", "record-only"}, {"device"});
  if (args.help_asked()) return args.print_help("gpunvme deploy", deploy_help());
  const DeployCommand c = parse_command(args);
  // The tools' one write rule (runtime/guard): a real device needs --allow-write, before anything is opened.
  for (const std::string& d : c.devices)
    guard::check_write_allowed(d, {args.has("allow-write"), c.force}, "deploy writes the model and a record at LBA 0");
  // Header first: a file that is not a GGUF (or not a regular file) is reported before any device is touched.
  const auto file = deploy::open_model_file(c.path);
  const bool record_only = args.has("record-only");
  // Before any device is opened: a stop from here on is reported, whatever it interrupts.
  if (!record_only && !args.has("print-dd")) deploy::report_stop_signals("gpunvme deploy");
  deploy::StripeUnit unit{std::nullopt, c.devices.size() > 1 ? model::default_stripe_unit(file) : 0};
  if (args.has("stripe-unit")) unit.given = args.get_size("stripe-unit", 0);
  const std::unique_ptr<deploy::Device> owned = c.devices.size() > 1
                                                    ? deploy::Device::create_stripe(c.devices, unit, c.force, c.nsid)
                                                    : std::make_unique<deploy::Device>(c.device, c.nsid);
  deploy::Device& dev = *owned;
  if (args.has("print-dd")) return print_dd(c, file, dev);
  if (dev.striped())
    std::printf("striped set of %zu members, stripe unit %s\n", c.devices.size(), dev.stripe_unit_text().c_str());

  deploy::DeployOptions opt;
  opt.start_lba = c.start;
  opt.force = c.force;
  opt.record_only = record_only;
  deploy::ProgressLine bar("deploy", !opt.record_only && (args.has("progress") || isatty(2)));
  opt.progress = bar.fn();
  const auto res = deploy::deploy_model(dev, c.path, opt);
  bar.finish();
  print_summary(res, opt.record_only, dev, c.device);
  return 0;
}

}  // namespace gpunvme::cli
