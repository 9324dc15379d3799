// gpunvme: bring NVMe controllers up from user space, move data, deploy and stream models.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "host/error.h"
#include "host/open_device.h"
#include "runtime/cli/args.h"
#include "runtime/cli/commands.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int, char**);
};

const Command kCommands[] = {
    {"demo", "bring up a controller, write and read back patterns, report (default: emulated, on a file)",
     gpunvme::cli::cmd_demo},
    {"identify", "print controller and namespace data, like `nvme id-ctrl` / `id-ns`", gpunvme::cli::cmd_identify},
    {"deploy", "write a GGUF model onto a namespace with a checksummed record (or print the dd command)",
     gpunvme::cli::cmd_deploy},
    {"verify", "re-read a deployed model and check every chunk's CRC-32C", gpunvme::cli::cmd_verify},
    {"ls", "list the model on a device: layers, tensors, experts and their LBA ranges", gpunvme::cli::cmd_ls},
    {"read", "copy blocks out to a file or stdout (read-only first contact with a drive)", gpunvme::cli::cmd_read},
    {"doctor", "check IOMMU, VFIO, memlock, GPU for a real drive; each problem with its fix", gpunvme::cli::cmd_doctor},
};

gpunvme::cli::Help help() {
  std::string brief =
      "usage: gpunvme COMMAND [options]\n\n"
      "A user-space NVMe driver whose I/O can be issued by the GPU. Every command runs on the\n"
      "built-in emulated controller (no hardware, no root) or on a real drive through VFIO.\n\n"
      "commands:\n";
  for (const auto& c : kCommands) brief += std::string("  ") + c.name + std::string(11 - std::strlen(c.name), ' ') + c.summary + "\n";
  brief += "\n`gpunvme COMMAND --help` explains each command; --device takes emu:PATH[,key=value...]\n"
           "(e.g. emu:/tmp/disk.img,size=1G or emu:ram,size=256M) or vfio:DDDD:BB:DD.F.\n";
  return {brief, std::string("\n") + gpunvme::host::device_string_help()};
}

}  // namespace

int main(int argc, char** argv) {
  const bool all = argc >= 2 && !std::strcmp(argv[1], "--help-all");
  if (argc < 2 || all || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    gpunvme::cli::print_help(argc < 2 ? stderr : stdout, "gpunvme", help(), all);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.run(argc, argv);
    } catch (const gpunvme::cli::UsageError& e) {
      std::fprintf(stderr, "gpunvme %s: %s\n", c.name, e.what());
      return 2;
    } catch (const gpunvme::Error& e) {
      std::fprintf(stderr, "gpunvme %s: error: %s\n", c.name, e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpunvme %s: error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "gpunvme: unknown command '%s'\n\n", argv[1]);
  gpunvme::cli::print_help(stderr, "gpunvme", help(), false);
  return 2;
}
