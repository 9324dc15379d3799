// Device-string parsing for the emulated controller.
#include "host/emulator/config.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <thread>

#include "host/emulator/drive_keys.h"
#include "host/emulator/fault_spec.h"
#include "host/emulator/generated.h"
#include "host/error.h"
#include "host/text/numbers.h"

namespace gpunvme::emu {
namespace {

constexpr const char* kValidKeys =
    "valid keys: lba=512|4096, size=N[K|M|G|T], mdts=0..15, queues=1..1024, mqes=1..65535, dstrd=0..8, "
    "namespaces=1..16, threads=1..64, poll=spin|adaptive, to=1..255 (CAP.TO, 500 ms units), ready_ms=0..10000, "
    "fault=KIND[:KEY=VALUE]... (repeatable; see a tool's --help or README); modeled drive: ";

// The generator's keys for the grammar's messages, where the program has one.
std::string gen_help() {
  const Generator* g = registered_generator();
  return g ? "; gen (a generated model computed on read, read-only): " + g->help : "";
}

[[noreturn]] void bad(std::string_view spec, const std::string& what) {
  throw Error(ErrorKind::kInvalidArgument,
              "emu device string \"" + std::string(spec) + "\": " + what + " (form: emu:PATH|ram|null" +
                  (registered_generator() ? "|gen" : "") + "[,key=value...]; " + kValidKeys + DriveKeys::help() +
                  gen_help() + ")");
}

// Whether `key` is one of the generator's (PATH gen only).
bool is_gen_key(std::string_view key) {
  const Generator* g = registered_generator();
  if (!g) return false;
  for (const std::string& k : g->keys)
    if (k == key) return true;
  return false;
}

uint64_t ranged(std::string_view spec, std::string_view key, std::string_view value, uint64_t lo, uint64_t hi) {
  uint64_t v = 0;
  try {
    v = text::parse_u64(key, value);
  } catch (const text::ParseError& e) {
    bad(spec, std::string(e.what()) + "; expected " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  if (v < lo || v > hi)
    bad(spec, std::string(key) + "=" + std::string(value) + " is not in " + std::to_string(lo) + ".." + std::to_string(hi));
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

namespace {

// Phase 1: "PATH,key=value,..." -> PATH and the options in order; a key given twice is an error
// (the last one silently winning hid typos in long device strings).
struct SpecParts {
  std::string_view path;
  std::vector<std::pair<std::string_view, std::string_view>> options;
};

SpecParts split_spec(std::string_view original, std::string_view spec) {
  SpecParts parts;
  const size_t comma = spec.find(',');
  parts.path = spec.substr(0, comma);
  if (parts.path.empty()) bad(original, "missing PATH (a file, or ram, or null)");
  std::string_view rest = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
  while (!rest.empty()) {
    const size_t next = rest.find(',');
    const std::string_view item = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next + 1);
    if (item.empty()) bad(original, "empty option");
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) bad(original, "option \"" + std::string(item) + "\" has no value");
    const std::string_view key = item.substr(0, eq);
    for (const auto& [seen, value] : parts.options)
      if (seen == key && key != "fault") bad(original, "key \"" + std::string(key) + "\" is given twice; give it once");
    parts.options.emplace_back(key, item.substr(eq + 1));
  }
  return parts;
}

// What the options say about the namespaces (the rest goes straight into ControllerConfig).
struct NamespaceKeys {
  uint64_t size = 0;  // 0: not given
  uint32_t lba = 512;
  uint32_t count = 1;
};

// Phase 2: one key. Returns false when `key` is not a controller or namespace key.
bool apply_key(std::string_view original, std::string_view key, std::string_view value, ControllerConfig* cfg,
               NamespaceKeys* ns) {
  if (key == "lba") {
    if (value != "512" && value != "4096") bad(original, "lba=" + std::string(value) + " must be 512 or 4096");
    ns->lba = value == "512" ? 512 : 4096;
  } else if (key == "size") {
    try {
      ns->size = text::parse_size("size", value);
    } catch (const text::ParseError& e) {
      bad(original, e.what());
    }
    if (ns->size == 0) bad(original, "size=0: the namespace needs at least one block");
  } else if (key == "mdts") {
    cfg->mdts = uint8_t(ranged(original, key, value, 0, 15));
  } else if (key == "queues") {
    cfg->max_io_queues = uint32_t(ranged(original, key, value, 1, 1024));
  } else if (key == "mqes") {
    cfg->mqes = uint32_t(ranged(original, key, value, 1, 65535));
  } else if (key == "dstrd") {
    cfg->dstrd = uint32_t(ranged(original, key, value, 0, 8));
  } else if (key == "namespaces") {
    ns->count = uint32_t(ranged(original, key, value, 1, 16));
  } else if (key == "threads") {
    cfg->io_threads = uint32_t(ranged(original, key, value, 1, 64));
  } else if (key == "to") {
    cfg->to_500ms = uint32_t(ranged(original, key, value, 1, 255));
  } else if (key == "ready_ms") {
    cfg->ready_delay = std::chrono::milliseconds(ranged(original, key, value, 0, 10000));
  } else if (key == "fault") {
    cfg->faults.push_back(parse_fault_spec(value));
  } else if (key == "poll") {
    if (value == "spin") cfg->poll = PollPolicy::kSpin;
    else if (value == "adaptive") cfg->poll = PollPolicy::kAdaptive;
    else bad(original, "poll=" + std::string(value) + " must be spin or adaptive");
  } else {
    return false;
  }
  return true;
}

// Bytes of block device `path`, or 0 when it cannot be read.
uint64_t block_device_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  uint64_t bytes = 0;
  if (fd >= 0 && ::ioctl(fd, BLKGETSIZE64, &bytes) != 0) bytes = 0;
  if (fd >= 0) ::close(fd);
  return bytes;
}

// Phase 3, per file-backed namespace: the backing must be a regular file (created when missing and
// size= is given) or a block device at least size= large (a block device cannot grow).
void check_backing_path(const std::string& path, uint64_t size) {
  const bool size_given = size != 0;
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    if (size_given) return;  // the namespace creates it
    throw Error(ErrorKind::kNotFound,
                "emu: " + path + " does not exist; pass size=... to create it (e.g. emu:" + path + ",size=1G)");
  }
  if (S_ISREG(st.st_mode)) return;
  if (S_ISBLK(st.st_mode)) {
    const uint64_t have = size_given ? block_device_bytes(path) : 0;
    if (have != 0 && have < size)
      throw Error(ErrorKind::kInvalidArgument, "emu: " + path + " is a block device of " + std::to_string(have) +
                                                   " bytes, smaller than size=" + std::to_string(size) +
                                                   " (a block device cannot grow; leave size= out to use all of it)");
    return;
  }
  const char* kind = S_ISCHR(st.st_mode) ? "a character device" : S_ISDIR(st.st_mode) ? "a directory" : "not a regular file";
  throw Error(ErrorKind::kInvalidArgument, "emu: " + path + " is " + kind +
                                               "; an emulated namespace is backed by a regular file or a block device "
                                               "(or use emu:ram, or emu:null to keep no data)");
}

// Phase 3: the namespaces, all alike; file-backed namespace 1 is PATH itself, further ones PATH.2, PATH.3, ...
// Phase 3 for PATH gen: the generator says how large the namespace is (size= would contradict it).
uint64_t generated_size(std::string_view original, const NamespaceKeys& keys,
                        const std::vector<std::pair<std::string, std::string>>& gen) {
  if (keys.size != 0) bad(original, "size= is not given for emu:gen: the generated model sets the namespace's size");
  try {
    return registered_generator()->size(gen, keys.lba);
  } catch (const std::invalid_argument& e) {
    bad(original, e.what());
  }
}

std::vector<NamespaceConfig> make_namespaces(std::string_view original, std::string_view path, NamespaceKeys keys,
                                             std::vector<std::pair<std::string, std::string>> gen) {
  Backing backing = Backing::kFile;
  if (path == "ram") backing = Backing::kRam;
  else if (path == "null") backing = Backing::kNull;
  else if (path == "gen") backing = Backing::kGenerated;
  if (backing == Backing::kGenerated) keys.size = generated_size(original, keys, gen);
  const bool size_given = keys.size != 0;
  if (size_given && keys.size % keys.lba != 0)
    bad(original, "size " + std::to_string(keys.size) + " is not a multiple of the LBA size " + std::to_string(keys.lba));
  if (!size_given && backing == Backing::kRam) keys.size = 1ull << 30;   // 1 GiB, committed lazily
  if (!size_given && backing == Backing::kNull) keys.size = 1ull << 40;  // 1 TiB of nothing
  std::vector<NamespaceConfig> out;
  for (uint32_t i = 1; i <= keys.count; ++i) {
    NamespaceConfig ns;
    ns.backing = backing;
    ns.lba_bytes = keys.lba;
    ns.size_bytes = keys.size;
    ns.gen = gen;
    if (backing == Backing::kFile) {
      ns.path = std::string(path) + (i == 1 ? "" : "." + std::to_string(i));
      check_backing_path(ns.path, size_given ? keys.size : 0);
    }
    out.push_back(std::move(ns));
  }
  return out;
}

// A modeled drive stands for a device that serves many queues in parallel: one controller thread
// (the default) copies about 4.5 GB/s on the H100's host, below a PCIe 4 drive, so a modeled drive
// without threads= gets one thread per two cores, at most 8 (on CI's 2 cores: still 1). The emulator,
// not the model, would otherwise be the limit that benchmarks quote efficiency against.
uint32_t modeled_drive_threads() {
  return std::clamp<uint32_t>(std::thread::hardware_concurrency() / 2, 1, 8);
}

bool has_key(const SpecParts& parts, std::string_view key) {
  for (const auto& kv : parts.options)
    if (kv.first == key) return true;
  return false;
}

}  // namespace

ControllerConfig parse_emu_device(std::string_view spec) {
  const std::string_view original = spec;
  if (is_emu_device(spec)) spec.remove_prefix(4);
  ControllerConfig cfg;
  cfg.name = "emu:" + std::string(spec);
  const SpecParts parts = split_spec(original, spec);
  NamespaceKeys ns;
  DriveKeys drive;
  std::string drive_error;
  const bool gen = parts.path == "gen";
  if (gen && !registered_generator())
    bad(original, "emu:gen (a generated model computed on read) needs a program built with the model generator: "
                  "llm, llm_tokens, llm_make_model; this one has none");
  std::vector<std::pair<std::string, std::string>> gen_keys;
  for (const auto& [key, value] : parts.options) {
    if (apply_key(original, key, value, &cfg, &ns)) continue;
    if (gen && is_gen_key(key)) {
      gen_keys.emplace_back(key, value);
      continue;
    }
    if (!drive.take(key, value, &drive_error)) bad(original, "unknown key \"" + std::string(key) + "\"");
    if (!drive_error.empty()) bad(original, drive_error);
  }
  if (!drive.resolve(&cfg.drive, &drive_error)) bad(original, drive_error);
  // Faults are checked against the whole string (queues= may follow fault=).
  size_t fault = 0;
  for (const auto& [key, value] : parts.options)
    if (key == "fault") check_fault_can_fire(value, cfg.faults[fault++], cfg.max_io_queues);
  if (cfg.drive.limits_anything() && !has_key(parts, "threads")) cfg.io_threads = modeled_drive_threads();
  cfg.namespaces = make_namespaces(original, parts.path, ns, std::move(gen_keys));
  return cfg;
}

}  // namespace gpunvme::emu
