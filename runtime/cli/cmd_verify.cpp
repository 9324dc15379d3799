// `gpunvme verify`: re-reads a deployed model through the driver and checks every chunk's CRC-32C.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "host/open_device.h"
#include "runtime/cli/args.h"
#include "runtime/cli/commands.h"
#include "runtime/cli/format.h"
#include "runtime/deploy/shell_quote.h"
#include "runtime/deploy/verify.h"

namespace gpunvme::cli {
namespace {

Help verify_help() {
  return {"usage: gpunvme verify --device DEVICE [--nsid N] [--start-lba N] [--against MODEL.gguf] [--progress]\n"
          "\n"
          "Finds the model on a namespace (the deploy record at LBA 0, or a GGUF written by plain dd at\n"
          "LBA 0, --start-lba or the 1 MiB default), re-reads every byte of it through the driver and\n"
          "checks the CRC-32C of every chunk against the deploy record. Prints one line per chunk with its\n"
          "LBA range and pass/fail, then a summary.\n"
          "\n"
          "exit status: 0 every byte checked and equal; 1 a difference, an unfinished deploy, no model or an\n"
          "error; 2 a usage error; 3 header only, bytes unverified (no record, no --against).\n"
          "\n"
          "  --device DEVICE      the namespace to read (required); nothing is written. Repeat it for a\n"
          "                       striped set: every member, in order\n"
          "  --nsid N             namespace id (default 1)\n"
          "  --start-lba N        where dd put a model that has no deploy record\n"
          "  --against FILE       also compare every chunk with this GGUF file\n"
          "  --progress           show the progress line even when stderr is not a terminal\n"
          "\n"
          "example:\n"
          "  gpunvme deploy model.gguf --device emu:/tmp/models.img,size=1G\n"
          "  gpunvme verify --device emu:/tmp/models.img --against model.gguf\n",
          std::string("\n"
                      "A model written by dd without a record has no checksums: verify then checks that its GGUF header\n"
                      "parses and that every tensor lies on the device, and reads every byte back, but cannot say the\n"
                      "bytes are right (exit 3); add --against to compare the bytes with the file (or write a record:\n"
                      "gpunvme deploy MODEL.gguf --record-only ...). An unfinished deploy (interrupted, failed, or still\n"
                      "running) is refused.\n"
                      "\n") +
              host::device_string_help()};
}

// Header and bounds fine, but no record and no --against: nothing says the bytes are right.
constexpr int kExitUnverified = 3;

// What to do about a failed verify: a read error is the device's (re-writing the model cannot help while
// the device cannot read), a CRC mismatch or a bad header is the bytes' (a re-deploy repairs them).
void print_verdict(const deploy::VerifyReport& rep, const std::vector<std::string>& devices) {
  if (rep.device_failed())
    std::printf("the device failed to read (the errors above name the LBAs and the NVMe status): that is not a checksum "
                "mismatch, and re-deploying will not help until the device reads those blocks again (check the drive)\n");
  if (rep.failed_chunks() != 0 || !rep.problems.empty()) {
    std::string flags;
    for (const std::string& d : devices) flags += " --device " + printable(deploy::shell_quote(d));
    std::printf("%s: re-deploy the model (gpunvme deploy MODEL.gguf%s) to repair it\n",
                rep.failed_chunks() ? "the bytes differ from what was deployed" : "the model on the device is damaged",
                flags.c_str());
  }
}

}  // namespace

int cmd_verify(int argc, char** argv) {
  Args args(argc, argv, 2, {"device", "nsid", "start-lba", "against"}, {"progress"}, {"device"});
  if (args.help_asked()) return args.print_help("gpunvme verify", verify_help());
  if (!args.positional().empty()) {
    throw UsageError("verify takes no file arguments; to compare with a file use --against " + args.positional()[0]);
  }
  if (!args.has("device")) throw UsageError("--device is required, e.g. --device emu:/tmp/models.img (see --help)");
  // Several --device: a striped set's members, in order (its logical volume holds the model).
  const auto owned = deploy::Device::open(args.all("device"), uint32_t(args.get_u64("nsid", 1)), host::Access::kReadOnly);
  deploy::Device& dev = *owned;
  deploy::VerifyOptions opt;
  if (args.has("start-lba")) opt.start_lba = args.get_u64("start-lba", 0);
  opt.against = args.get("against");
  deploy::ProgressLine bar("verify", args.has("progress") || isatty(2));
  opt.progress = bar.fn();
  const auto rep = [&] {
    try {
      return deploy::verify_device(dev, opt);
    } catch (const Error& e) {  // finding the model failed: the record or the header did not read
      if (!deploy::is_read_failure(e)) throw;
      throw Error(e.kind(), std::string(e.what()) + "; the device failed to read where the model is found (a read "
                                                   "error, not a checksum mismatch): re-deploying will not help until it reads");
    }
  }();
  bar.finish();

  const auto& d = rep.detected;
  std::printf("verifying %s: %s\n", printable(dev.name()).c_str(), printable(d.describe()).c_str());
  std::printf("%s in %zu chunk%s of %s, %llu tensors; compared with: %s\n", human_bytes(double(rep.model_bytes)).c_str(),
              rep.chunks.size(), rep.chunks.size() == 1 ? "" : "s",
              human_bytes(double(uint64_t{1} << rep.chunk_shift)).c_str(), (unsigned long long)rep.n_tensors,
              d.record && !opt.against.empty() ? ("deploy record and " + opt.against).c_str()
              : d.record                       ? "deploy record"
              : !opt.against.empty()           ? opt.against.c_str()
                                               : "nothing (no record, no --against): bytes only read back");
  for (const auto& c : rep.chunks) {
    std::string status;
    if (c.unreadable()) {
      status = "READ ERROR";
    } else if (!c.expected && !c.file) {
      status = "read";
    } else if (c.ok()) {
      status = "ok";
    } else {
      char b[96];
      std::snprintf(b, sizeof b, "FAIL (expected %08x, read %08x)", c.expected ? *c.expected : *c.file, c.actual);
      status = b;
    }
    char crc[16];
    std::snprintf(crc, sizeof crc, c.unreadable() ? "--------" : "%08x", c.actual);
    std::printf("  chunk %-4llu LBA %llu..%llu  %s  crc32c %s  %s\n", (unsigned long long)c.index,
                (unsigned long long)c.first_lba, (unsigned long long)(c.end_lba - 1),
                human_bytes(double(c.bytes)).c_str(), crc, status.c_str());
    if (c.unreadable()) std::printf("    %s\n", printable(c.read_error).c_str());
  }
  for (const auto& p : rep.problems) std::printf("  problem: %s\n", printable(p).c_str());
  for (const auto& e : rep.read_errors) std::printf("  read error: %s\n", printable(e).c_str());
  const double rate = rep.seconds > 0 ? double(rep.model_bytes) / rep.seconds : 0;
  if (!rep.ok()) {
    std::printf("FAILED: %llu of %zu chunks differ, %llu could not be read, %zu other problem%s (%s re-read in %.2f s, %s/s)\n",
                (unsigned long long)rep.failed_chunks(), rep.chunks.size(), (unsigned long long)rep.unreadable_chunks(),
                rep.problems.size(), rep.problems.size() == 1 ? "" : "s", human_bytes(double(rep.model_bytes)).c_str(),
                rep.seconds, human_bytes(rate).c_str());
    print_verdict(rep, args.all("device"));
    return 1;
  }
  if (!rep.checked_bytes()) {
    std::printf("UNVERIFIED (header only): the GGUF header parses and all %llu tensors lie on the device; %s read "
                "back in %.2f s but not compared with anything. Add --against MODEL.gguf to compare bytes.\n",
                (unsigned long long)rep.n_tensors, human_bytes(double(rep.model_bytes)).c_str(), rep.seconds);
    return kExitUnverified;
  }
  std::printf("OK: %zu/%zu chunks match (%s re-read in %.2f s, %s/s)\n", rep.chunks.size(), rep.chunks.size(),
              human_bytes(double(rep.model_bytes)).c_str(), rep.seconds, human_bytes(rate).c_str());
  return 0;
}

}  // namespace gpunvme::cli
