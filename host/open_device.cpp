#include "host/open_device.h"

#include "host/emulator/config.h"
#include "host/emulator/controller.h"
#include "host/error.h"
#include "host/vfio/vfio_transport.h"

namespace gpunvme::host {

const char* device_string_brief() {
  return "DEVICE: emu:PATH[,key=value...] (the emulated controller on an image file, or `ram` / `null`,\n"
         "        e.g. emu:ram,size=1G) or vfio:DDDD:BB:DD.F (a real drive bound to vfio-pci)\n";
}

const char* device_string_help() {
  return "Device strings:\n"
         "  emu:PATH[,key=value...]  the built-in emulated NVMe controller (no hardware, no root).\n"
         "                           PATH is a raw image file, or `ram` / `null` (no data), or `gen`: a\n"
         "                           generated model with its deploy record, computed on read and read-only, in\n"
         "                           llm, llm_tokens and llm_make_model (emu:gen,shape=NAME,type=q4_k|q6_k\n"
         "                           [,model_seed=S]: the bytes llm_make_model --seed S writes; no size=)\n"
         "                           keys: size=1G lba=512|4096 mdts=N queues=N mqes=N dstrd=N\n"
         "                                 namespaces=N threads=N poll=adaptive|spin\n"
         "                           modeled drive (docs/drives.md): drive=sn530|pcie4|pcie5|none\n"
         "                                 bw=7G wbw=6G (bytes/s, decimal) iops=1M wiops=1M\n"
         "                                 lat=60us lat99=150us wlat=20us wlat99=60us par=N seed=N\n"
         "                           injected faults (repeatable, README \"Faults and recovery\"):\n"
         "                                 fault=KIND[:KEY=VALUE]...  KIND error|drop|delay|wrong-cid|cfs|removal|\n"
         "                                 fatal-at-enable|slow-ready|never-ready; KEY q=N|admin|io|any op=read|write|\n"
         "                                 flush|CODE nth=N every=N times=N at=DUR sct=CODE sc=CODE dnr=0|1 by=DUR\n"
         "                                 xor=CODE (CODE: decimal or 0x-hex; DUR: 50ms, 2s)\n"
         "                           e.g. emu:/tmp/disk.img,size=1G   emu:ram,size=256M,lba=4096\n"
         "                                emu:ram,size=4G,drive=pcie4,threads=4\n"
         "                                emu:ram,size=1G,fault=drop:every=10000,fault=error:sct=2:sc=0x81:every=5000\n"
         "                           numbers are decimal (no sign, 0x or leading 0); sizes take K/M/G/T =\n"
         "                           1024^1..4; a key given twice is an error. PATH may be a block device\n"
         "                           (emu:/dev/nvme0n1 writes that disk): tools that write then need --allow-write\n"
         "  vfio:DDDD:BB:DD.F        a real NVMe controller bound to vfio-pci\n"
         "                           (bind it with `scripts/setup_vfio.sh bind DDDD:BB:DD.F`)\n";
}

std::unique_ptr<Transport> open_transport(std::string_view device, Access access) {
  if (emu::is_emu_device(device)) {
    auto cfg = emu::parse_emu_device(device);
    for (auto& ns : cfg.namespaces) ns.read_only = access == Access::kReadOnly;
    return emu::open_emulated(cfg);
  }
  if (vfio::is_vfio_device_string(device)) return vfio::open_vfio_transport(device);
  throw Error(ErrorKind::kInvalidArgument, "unknown device string '" + std::string(device) + "'\n" + device_string_help());
}

}  // namespace gpunvme::host
