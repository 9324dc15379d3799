// Configuration of the emulated NVMe controller and the "emu:" device-string parser.
// The device string is what every tool accepts, e.g. "emu:ram,size=256M,lba=4096" or "emu:/tmp/disk.img,size=1G".
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "host/emulator/drive_params.h"
#include "host/emulator/faults.h"

namespace gpunvme::emu {

enum class Backing : uint8_t {
  kFile,  // a plain raw image, read and written with pread/pwrite (dd onto it works)
  kRam,   // anonymous memory, lazily committed
  kNull,  // no data at all: commands are validated (NSID, LBA range, sizes) and complete at once
  kGenerated,  // read-only bytes computed on read by the program's generator (generated.h): emu:gen
};

struct NamespaceConfig {
  Backing backing = Backing::kRam;
  std::string path;         // kFile only
  uint64_t size_bytes = 0;  // 0 for kFile: the file's current size (it must exist)
  uint32_t lba_bytes = 512; // 512 or 4096
  bool read_only = false;   // kFile: open O_RDONLY, never create or extend (namespace.h)
  std::vector<std::pair<std::string, std::string>> gen;  // kGenerated: the generator's keys (generated.h)
};

enum class PollPolicy : uint8_t {
  kAdaptive,  // spin briefly, then sleep with growing back-off (up to max_idle_sleep)
  kSpin,      // never sleep (benchmarks; burns one core per thread)
};

struct ControllerConfig {
  std::string name = "emu:ram";  // the device string, reported by Transport::name()
  std::vector<NamespaceConfig> namespaces{NamespaceConfig{}};
  uint8_t mdts = 8;               // Identify MDTS: max transfer 2^mdts * 4 KiB; 0 = no limit
  uint32_t max_io_queues = 64;    // I/O SQ/CQ pairs the controller can grant (QIDs 1..max)
  uint32_t mqes = 4095;           // CAP.MQES, 0's based: the largest queue has mqes+1 entries
  uint32_t dstrd = 0;             // CAP.DSTRD: doorbell stride 4 << dstrd bytes
  // CAP.TO in 500 ms units: the host's bound for RDY transitions. 10 s, within what real drives report:
  // RDY comes from a host thread here, which a loaded 2-core machine left unscheduled past 2 s (the old
  // default) while test suites and builds shared it.
  uint32_t to_500ms = 20;
  std::chrono::microseconds ready_delay{1000};  // CC.EN -> CSTS.RDY (both directions), and SHN
  uint32_t io_threads = 1;        // controller threads serving I/O queues (plus one admin thread)
  PollPolicy poll = PollPolicy::kAdaptive;
  std::chrono::microseconds max_idle_sleep{100};  // adaptive policy's longest sleep
  bool contiguous_queues_required = true;  // CAP.CQR: PC=1 is required on Create I/O SQ/CQ
  uint16_t vid = 0x1b36;          // Identify VID (QEMU/Red Hat's id, as emulated NVMe devices use)
  std::string serial = "GPUNVME-EMU-0001";
  // Modeled drive (drive_model.h): when it limits anything, completions are paced like that drive's.
  DriveParams drive;
  // Faults armed when the controller is built (fault= keys, host/emulator/fault_spec.h).
  std::vector<Fault> faults;
};

// Parses "emu:PATH[,key=value...]" (the "emu:" prefix is optional). PATH is a file, or "ram" / "null", or
// "gen": bytes computed on read by the program's generator, which takes keys of its own (generated.h;
// size= is the generator's, not given).
// Keys: lba, size, mdts, queues, mqes, dstrd, namespaces, threads, poll, to, ready_ms; the modeled
// drive: drive (a profile), bw, wbw, iops, wiops, lat, lat99, wlat, wlat99, par, seed (docs/drives.md);
// and fault=... (fault_spec.h), the one key that may be given more than once.
// Numbers and sizes follow host/text/numbers.h (decimal only; size= with K/M/G/T = powers of 1024); a key
// given twice is an error. Throws gpunvme::Error(kInvalidArgument) naming the bad part and listing the
// valid keys, or when PATH exists but is neither a regular file nor a block device; throws kNotFound
// when the file is missing and no size was given.
ControllerConfig parse_emu_device(std::string_view spec);

// "7G" -> 7e9, "1.5M" -> 1.5e6, "6.5Gi" -> 6.5 * 2^30: a decimal number with an optional SI
// suffix (k/K, M, G, T; decimal like drive spec sheets, binary with a following "i"). Returns false on
// syntax errors or a negative or non-finite value.
bool parse_rate(std::string_view text, double* out);

// "80us" -> 80000: a decimal number with a unit ns, us, ms or s. Returns false otherwise.
bool parse_duration_ns(std::string_view text, uint64_t* out);

// Whether a device string names the emulator ("emu:" prefix).
inline bool is_emu_device(std::string_view spec) { return spec.substr(0, 4) == "emu:"; }

}  // namespace gpunvme::emu
