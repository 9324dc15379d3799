// `gpunvme ls`: the model on a device, its layers, tensors and experts with their LBA ranges.
#include <cstdio>

#include "host/open_device.h"
#include "runtime/cli/args.h"
#include "runtime/cli/commands.h"
#include "runtime/deploy/device.h"
#include "runtime/deploy/listing.h"

namespace gpunvme::cli {
namespace {

Help ls_help() {
  return {"usage: gpunvme ls --device DEVICE [--nsid N] [--start-lba N] [--tensors] [--experts] [--json]\n"
          "\n"
          "Lists the model on a namespace from the device alone: it reads the deploy record at LBA 0\n"
          "(written by `gpunvme deploy`) or finds a GGUF written by plain dd (at LBA 0, at --start-lba,\n"
          "or at the 1 MiB default), parses the GGUF header through the driver, and prints the model's\n"
          "name, start LBA, size and block size, every layer (blk.N) with its LBA range and bytes, and the\n"
          "non-layer tensors (token embedding, output, norms).\n"
          "\n"
          "  --device DEVICE   the namespace to read (required); nothing is written. Repeat it for a striped\n"
          "                    set: every member, in order (one member alone is named with its place)\n"
          "  --nsid N          namespace id (default 1)\n"
          "  --start-lba N     where dd put a model that has no deploy record\n"
          "  --tensors         also every tensor: type, LBA range, byte offset in its first block, bytes\n"
          "  --experts         also every MoE expert slice: (layer, expert, projection) -> LBA range\n"
          "  --json            machine-readable output (same content)\n"
          "\n"
          "example:\n"
          "  gpunvme deploy model.gguf --device emu:/tmp/models.img,size=1G\n"
          "  gpunvme ls --device emu:/tmp/models.img --tensors\n",
          std::string("\n") + host::device_string_help()};
}

}  // namespace

int cmd_ls(int argc, char** argv) {
  Args args(argc, argv, 2, {"device", "nsid", "start-lba"}, {"tensors", "experts", "json"}, {"device"});
  if (args.help_asked()) return args.print_help("gpunvme ls", ls_help());
  if (!args.positional().empty()) throw UsageError("ls takes no file arguments; the model is read from --device");
  if (!args.has("device")) throw UsageError("--device is required, e.g. --device emu:/tmp/models.img (see --help)");
  // Several --device: a striped set's members, in order (its logical volume holds the model).
  const auto owned = deploy::Device::open(args.all("device"), uint32_t(args.get_u64("nsid", 1)), host::Access::kReadOnly);
  deploy::Device& dev = *owned;
  std::optional<uint64_t> start;
  if (args.has("start-lba")) start = args.get_u64("start-lba", 0);
  const auto listing = deploy::list_model(dev.block_io(), start);
  const std::string text =
      deploy::format_listing(listing, {.tensors = args.has("tensors"), .experts = args.has("experts"), .json = args.has("json")});
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace gpunvme::cli
