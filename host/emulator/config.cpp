// Device-string parsing for the emulated controller.
#include "host/emulator/config.h"

#include <sys/stat.h>

#include <charconv>
#include <cmath>
#include <limits>

#include "host/emulator/drive_keys.h"
#include "host/error.h"

namespace gpunvme::emu {
namespace {

constexpr const char* kValidKeys =
    "valid keys: lba=512|4096, size=N[K|M|G|T], mdts=0..15, queues=1..1024, mqes=1..65535, dstrd=0..8, "
    "namespaces=1..16, threads=1..64, poll=spin|adaptive, to=1..255 (CAP.TO, 500 ms units), ready_ms=0..10000; "
    "modeled drive: ";

[[noreturn]] void bad(std::string_view spec, const std::string& what) {
  throw Error(ErrorKind::kInvalidArgument,
              "emu device string \"" + std::string(spec) + "\": " + what + " (form: emu:PATH|ram|null[,key=value...]; " +
                  kValidKeys + DriveKeys::help() + ")");
}

bool parse_uint(std::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  uint64_t v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v, 10);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size()) return false;
  *out = v;
  return true;
}

uint64_t ranged(std::string_view spec, std::string_view key, std::string_view value, uint64_t lo, uint64_t hi) {
  uint64_t v = 0;
  if (!parse_uint(value, &v) || v < lo || v > hi)
    bad(spec, std::string(key) + "=" + std::string(value) + " is not a number in " + std::to_string(lo) + ".." +
                  std::to_string(hi));
  return v;
}

// A non-negative decimal number ("7", "7.3", ".5"); the rest of `text` is left in *rest.
bool parse_decimal(std::string_view text, double* out, std::string_view* rest) {
  size_t n = 0;
  while (n < text.size() && ((text[n] >= '0' && text[n] <= '9') || text[n] == '.')) ++n;
  if (n == 0) return false;
  double v = 0;
  const auto r = std::from_chars(text.data(), text.data() + n, v, std::chars_format::fixed);
  if (r.ec != std::errc() || r.ptr != text.data() + n || !std::isfinite(v) || v < 0) return false;
  *out = v;
  *rest = text.substr(n);
  return true;
}

}  // namespace

bool parse_rate(std::string_view text, double* out) {
  double v = 0;
  std::string_view suffix;
  if (!parse_decimal(text, &v, &suffix)) return false;
  int power = 0;  // of 1000 (or of 1024 with "i")
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'k': case 'K': power = 1; break;
      case 'M': power = 2; break;
      case 'G': power = 3; break;
      case 'T': power = 4; break;
      default: return false;
    }
    suffix.remove_prefix(1);
  }
  double base = 1000;
  if (power != 0 && !suffix.empty() && suffix[0] == 'i') {
    base = 1024;
    suffix.remove_prefix(1);
  }
  if (!suffix.empty()) return false;
  v *= std::pow(base, power);
  if (!std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool parse_duration_ns(std::string_view text, uint64_t* out) {
  double v = 0;
  std::string_view unit;
  if (!parse_decimal(text, &v, &unit)) return false;
  double scale = 0;
  if (unit == "ns") scale = 1;
  else if (unit == "us") scale = 1e3;
  else if (unit == "ms") scale = 1e6;
  else if (unit == "s") scale = 1e9;
  else return false;
  v = std::round(v * scale);
  if (!(v < 1.8e19)) return false;  // beyond uint64_t
  *out = uint64_t(v);
  return true;
}

bool parse_size(std::string_view text, uint64_t* out) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  uint64_t n = 0;
  if (!parse_uint(text.substr(0, digits), &n)) return false;
  std::string_view suffix = text.substr(digits);
  unsigned shift = 0;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      case 't': case 'T': shift = 40; break;
      case 'b': case 'B': shift = 0; break;
      default: return false;
    }
    suffix.remove_prefix(1);
    if (shift != 0 && (suffix == "iB" || suffix == "ib" || suffix == "B" || suffix == "b")) suffix = {};
    if (!suffix.empty()) return false;
  }
  if (shift != 0 && n > (std::numeric_limits<uint64_t>::max() >> shift)) return false;
  *out = n << shift;
  return true;
}

ControllerConfig parse_emu_device(std::string_view spec) {
  const std::string_view original = spec;
  if (is_emu_device(spec)) spec.remove_prefix(4);
  ControllerConfig cfg;
  cfg.name = "emu:" + std::string(spec);

  const size_t comma = spec.find(',');
  const std::string_view path = spec.substr(0, comma);
  std::string_view rest = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
  if (path.empty()) bad(original, "missing PATH (a file, or ram, or null)");

  Backing backing = Backing::kFile;
  if (path == "ram") backing = Backing::kRam;
  else if (path == "null") backing = Backing::kNull;

  uint64_t size = 0;
  uint32_t lba = 512;
  uint32_t namespaces = 1;
  bool size_given = false;
  DriveKeys drive;
  std::string drive_error;
  while (!rest.empty()) {
    const size_t next = rest.find(',');
    const std::string_view item = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next + 1);
    if (item.empty()) bad(original, "empty option");
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) bad(original, "option \"" + std::string(item) + "\" has no value");
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    if (key == "lba") {
      if (value != "512" && value != "4096") bad(original, "lba=" + std::string(value) + " must be 512 or 4096");
      lba = value == "512" ? 512 : 4096;
    } else if (key == "size") {
      if (!parse_size(value, &size) || size == 0)
        bad(original, "size=" + std::string(value) + " is not a size such as 4096, 512K, 256M, 1G, 2T");
      size_given = true;
    } else if (key == "mdts") {
      cfg.mdts = uint8_t(ranged(original, key, value, 0, 15));
    } else if (key == "queues") {
      cfg.max_io_queues = uint32_t(ranged(original, key, value, 1, 1024));
    } else if (key == "mqes") {
      cfg.mqes = uint32_t(ranged(original, key, value, 1, 65535));
    } else if (key == "dstrd") {
      cfg.dstrd = uint32_t(ranged(original, key, value, 0, 8));
    } else if (key == "namespaces") {
      namespaces = uint32_t(ranged(original, key, value, 1, 16));
    } else if (key == "threads") {
      cfg.io_threads = uint32_t(ranged(original, key, value, 1, 64));
    } else if (key == "to") {
      cfg.to_500ms = uint32_t(ranged(original, key, value, 1, 255));
    } else if (key == "ready_ms") {
      cfg.ready_delay = std::chrono::milliseconds(ranged(original, key, value, 0, 10000));
    } else if (key == "poll") {
      if (value == "spin") cfg.poll = PollPolicy::kSpin;
      else if (value == "adaptive") cfg.poll = PollPolicy::kAdaptive;
      else bad(original, "poll=" + std::string(value) + " must be spin or adaptive");
    } else if (drive.take(key, value, &drive_error)) {
      if (!drive_error.empty()) bad(original, drive_error);
    } else {
      bad(original, "unknown key \"" + std::string(key) + "\"");
    }
  }
  if (!drive.resolve(&cfg.drive, &drive_error)) bad(original, drive_error);

  if (size_given && size % lba != 0)
    bad(original, "size " + std::to_string(size) + " is not a multiple of the LBA size " + std::to_string(lba));
  if (!size_given && backing == Backing::kRam) size = 1ull << 30;   // 1 GiB, committed lazily
  if (!size_given && backing == Backing::kNull) size = 1ull << 40;  // 1 TiB of nothing

  cfg.namespaces.clear();
  for (uint32_t i = 1; i <= namespaces; ++i) {
    NamespaceConfig ns;
    ns.backing = backing;
    ns.lba_bytes = lba;
    ns.size_bytes = size;
    if (backing == Backing::kFile) {
      // Namespace 1 is PATH itself; further namespaces live in PATH.2, PATH.3, ...
      ns.path = std::string(path) + (i == 1 ? "" : "." + std::to_string(i));
      struct stat st{};
      if (!size_given) {
        if (::stat(ns.path.c_str(), &st) != 0)
          throw Error(ErrorKind::kNotFound, "emu: " + ns.path + " does not exist; pass size=... to create it (e.g. emu:" +
                                                ns.path + ",size=1G)");
        if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
          throw Error(ErrorKind::kInvalidArgument, "emu: " + ns.path + " is not a regular file");
      }
    }
    cfg.namespaces.push_back(std::move(ns));
  }
  return cfg;
}

}  // namespace gpunvme::emu
