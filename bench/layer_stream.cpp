// layer_stream: streams every layer of a model (a generated 70B-class layout, or a GGUF on the
// device) into GPU memory behind a synthetic compute kernel, with gpunvme (GPU- and CPU-initiated)
// and with the usual alternatives on the same bytes (mmap pipeline, O_DIRECT, cuFile), on the
// unthrottled emulator and on modeled drives; every byte is verified. `layer_stream --help` explains.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/baselines/baseline.h"
#include "bench/layer_stream.h"
#include "bench/layer_stream_modes.h"
#include "host/cpu_io.h"
#include "host/cuda_device.h"
#include "host/emulator/config.h"
#include "host/error.h"
#include "host/locked_open.h"
#include "host/open_device.h"
#include "host/text/escape.h"
#include "runtime/cli/args.h"
#include "runtime/cli/tool_main.h"
#include "runtime/guard/output_file.h"
#include "runtime/guard/write_guard.h"
#include "runtime/io/cpu_block_io.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/block_io.h"
#include "runtime/model/detect.h"
#include "runtime/model/lba_map.h"
#include "runtime/plan/command_plan.h"

using namespace gpunvme;
using namespace gpunvme::bench::ls;

namespace {

// --help: the modes, the common options and examples; --help-all: how each mode works, every option,
// what each column means, and the device strings.
cli::Help help() {
  return {"usage: layer_stream [options]\n"
          "\n"
          "Streams every layer of a model into GPU memory, double-buffered, behind a synthetic compute kernel,\n"
          "and measures each way of doing it on the same bytes in the same run: gpunvme-gpu (GPU-issued NVMe\n"
          "reads), gpunvme-cpu (CPU-issued) and the baselines mmap, odirect (pread O_DIRECT) and cufile. The\n"
          "GPU checks every byte; a mismatch fails the run (exit 1).\n"
          "\n"
          "  --modes LIST        comma-separated, default gpunvme-gpu,gpunvme-cpu,mmap,odirect,cufile\n"
          "  --drive LIST        drive profiles, comma-separated (default none,sn530,pcie4,pcie5); none: the\n"
          "                      unthrottled emulator. Known here: " +
              drive_profile_names() +
              "\n"
              "  --drives N          generated images: 1-4 emulated drives, lockstep striping (default 1)\n"
              "  --layers N          layers to stream (default 10: 7.0 GB of 70B-class layers)\n"
              "  --layer-bytes SIZE  bytes per generated layer (default 701956096: one Llama-3-70B Q6_K layer)\n"
              "  --gguf FILE         stream this model's layers instead of a generated layout\n"
              "  --json              one JSON object instead of the tables\n"
              "\n"
              "Examples:\n"
              "  layer_stream                                    # the defaults: see docs/performance.md\n"
              "  layer_stream --drives 4 --drive pcie5 --modes gpunvme-gpu,gpunvme-cpu\n"
              "  layer_stream --layers 4 --layer-bytes 64M --drive none --modes gpunvme-cpu,mmap,odirect\n",
          std::string("\n") +
              "  gpunvme-gpu  stream::LayerStreamer + stream::GpuSubmitter: kernels on a highest-priority CUDA\n"
              "               stream issue the NVMe reads into GPU-mapped DMA slots; the GPU orders the copy and\n"
              "               compute after them; the host never waits inside the loop (CUDA builds)\n"
              "  gpunvme-cpu  stream::LayerStreamer + stream::CpuSubmitter (pump thread): CPU-issued NVMe reads\n"
              "  mmap         ntransformer-style: mmap the file, one worker thread memcpy's a layer into one of\n"
              "               two pinned staging buffers, cudaMemcpyAsync to the GPU\n"
              "  odirect      pread(O_DIRECT) by --threads reader threads into pinned staging, cudaMemcpyAsync\n"
              "  cufile       cuFileRead into GPU memory (GDS compatibility mode without nvidia-fs), --threads\n"
              "               readers; only where meson found cufile.h and libcufile\n"
              "\n"
              "Every mode lands a layer in one of two device buffers (copy after the layer's reads; the gpunvme\n"
              "slots are pinned host memory the drive DMAs into), then the compute kernel reads EVERY byte of the\n"
              "layer in GPU memory, folds a position-dependent checksum and spins until --compute-us have passed.\n"
              "The host compares each layer's checksum with the expected one: any mismatch fails the run (exit 1).\n"
              "Without a GPU (non-CUDA build, or none present) a CPU consumer does the same on the host.\n"
              "\n"
              "Bytes: by default --drives emulated NVMe namespaces backed by files (--image, on /dev/shm: RAM) hold\n"
              "a generated 70B-class layout: --layers layers of --layer-bytes, each striped over the drives\n"
              "(1/N of every layer per drive), filled once through the driver with a pattern derived from the\n"
              "drive and byte address. The baselines read those same files at the same offsets. --gguf streams a\n"
              "real model's layers (runtime/plan layer_extents) instead, verified against the GGUF file.\n"
              "\n"
              "All options:\n"
              "  --device DEV        a namespace to use instead of a generated image; repeat for 2-4 drives.\n"
              "                      Generated layouts are WRITTEN onto it (real devices need --allow-write).\n"
              "  --drives N          generated images: 1-4 emulated drives, lockstep striping (default 1)\n"
              "  --image PREFIX      generated images PREFIX-dN.img (default /dev/shm/gpunvme-ls); deleted at\n"
              "                      the end unless --keep. On a disk filesystem the page cache is dropped\n"
              "                      (posix_fadvise DONTNEED) before every pass, and the report says how much stayed\n"
              "  --layers N          layers to stream (default 10: 7.0 GB, enough for steady state and a default\n"
              "                      run under a minute; --gguf: all of the model's)\n"
              "  --layer-bytes SIZE  bytes per generated layer (default 701956096 = one Llama-3-70B Q6_K layer:\n"
              "                      855,638,016 weights x 210 B/256 + 64 KiB of norms; 80 of them = 56.2 GB of\n"
              "                      the 57.9 GB GGUF). K/M/G suffixes are binary (669M = 701,497,344)\n"
              "  --gguf FILE         stream this model's layers; it is written at 1 MiB on the (single) device\n"
              "                      first, unless --deployed says it is there (dd'ed or `gpunvme deploy`ed)\n"
              "  --compute-us N|auto synthetic compute per layer (default auto: each mode's own measured I/O time\n"
              "                      per layer, i.e. a balanced pipeline, the hardest case to hide). A real 70B\n"
              "                      Q6_K layer at batch 1 computes in ~0.3 ms on an H100 (it reads 0.7 GB of HBM)\n"
              "  --modes LIST        comma-separated, default gpunvme-gpu,gpunvme-cpu,mmap,odirect,cufile\n"
              "  --drive LIST        drive profiles, comma-separated (default none,sn530,pcie4,pcie5): the gpunvme\n"
              "                      modes run once per profile on emulated drives `drive=PROFILE`; `none` is the\n"
              "                      unthrottled emulator (RAM speed). Known here: " +
                  drive_profile_names() + "\n"
              "  --pace-baselines    also run the baselines on each modeled drive, every read paced by the same\n"
              "                      drive model (default: baselines only run unthrottled, on profile none)\n"
              "  --passes N          timed passes per mode (default 1; the best is reported), after a 2-layer warm-up\n"
              "  --threads N         reader threads of odirect and cufile (default 4)\n"
              "  --chunk SIZE        bytes per baseline read / copy step and per paced request (default 4M)\n"
              "  --gpu-queues N      NVMe queues per drive driven by the GPU (default 8: one emulator thread copies\n"
              "                      about 3.4 GB/s here, so 4 queues capped a modeled pcie5 at 93 % on the H100)\n"
              "  --cpu-queues N      CpuSubmitters (a queue and a pump thread each) per drive for gpunvme-cpu,\n"
              "                      each reading a contiguous part of every layer (default 2)\n"
              "                      Generated images get emulator threads = max(gpu, cpu queues): queue q is\n"
              "                      served by emulator thread (q-1) % threads\n"
              "  --max-command SIZE  cap on bytes per NVMe read command (default: the controller's MDTS)\n"
              "  --emu-opts KEYS     extra emulator keys for generated images, e.g. poll=spin or mdts=9, or faults:\n"
              "                      fault=error:sc=0x81:every=5000 (the README's grammar); what recovery did is a\n"
              "                      'recovery:' line per row and \"recovery\" in --json\n"
              "  --keep              keep generated images (and reuse them next time when they match)\n"
              "  --allow-write       permit writing the generated pattern (or --gguf) onto a real device: vfio:, or\n"
              "                      emu: on a block device\n"
              "  --force             ... even over a partition table or filesystem signature\n"
              "  --json              one JSON object instead of the tables\n"
              "  --json-out FILE     also write that JSON object to FILE (tables still printed)\n"
              "\n"
              "What is reported, per drive profile and mode (n layers, B bytes read, S = 701,956,096):\n"
              "  read GB/s    B / T_read, T_read = from the first read to the last layer's bytes landing in host\n"
              "               memory (DMA slot or staging buffer; GPU memory for cufile): the read stage alone\n"
              "  GPU GB/s     B / T_io, T_io = wall time of a pass with no synthetic compute: every layer in GPU\n"
              "               memory and checked (the kernel still reads every byte); layer ms = T_io / n\n"
              "  pipe GB/s    B / T_pipe, T_pipe = wall time of a pass with --compute-us per layer\n"
              "  hidden       share of the I/O time hidden behind compute: 1 - (T_pipe - C) / T_io, where C is the\n"
              "               summed kernel time (CUDA events) and T_pipe - C the time the compute stream starved.\n"
              "               At most 1 - 1/n (the first layer's read cannot overlap anything); when compute is\n"
              "               shorter than I/O it is at most C / T_io\n"
              "  tok/s        70B Q6_K tokens/s this implies: 1 / (80 x max(S / GPU_GBps, t_compute)), t_compute =\n"
              "               --compute-us (auto: 0, i.e. compute is hidden); tok/s meas = pipe GB/s / (80 x S)\n"
              "  efficiency   read GB/s / (drives x the modeled drive's limit for these reads: bytes / the drive\n"
              "               model's channel floor for the layer's bytes and commands); target >= 97%\n"
              "  vs X         GPU GB/s ratio of the row to baseline X in the same drive profile\n"
              "The copy into GPU memory crosses the GPU's PCIe link (H100: Gen5 x16, ~50 GB/s in practice): with\n"
              "4 pcie5 drives (58.8 GB/s) that link, not the drives, bounds GPU GB/s and, through slot reuse,\n"
              "read GB/s too.\n"
              "Baselines on profile none read a RAM-backed file (unless --image is on disk): they and the\n"
              "unthrottled gpunvme rows compare software paths at memory speed, not drives.\n"
              "\n"
              "Examples:\n"
              "  layer_stream                                    # the defaults: see docs/performance.md\n"
              "  layer_stream --drives 4 --drive pcie5 --modes gpunvme-gpu,gpunvme-cpu\n"
              "  layer_stream --layers 4 --layer-bytes 64M --drive none --modes gpunvme-cpu,mmap,odirect\n"
              "  layer_stream --gguf model.gguf --drive none,pcie4 --compute-us 300\n"
              "\n"
              "Exit status: 0 all verified, 1 a mismatch or an error in a mode, 2 bad usage.\n"
              "\n" +
              host::device_string_help()};
}

// The modes: a baseline reads the file behind the namespace, a gpunvme mode the namespace itself.
struct ModeKind {
  const char* name;
  std::unique_ptr<Mode> (*baseline)(const BaselineContext&);  // null for the gpunvme modes
  std::unique_ptr<Mode> (*gpunvme)(const GpunvmeContext&);
};
const ModeKind kModes[] = {
    {"gpunvme-gpu", nullptr, make_gpunvme_gpu_mode},
    {"gpunvme-cpu", nullptr, make_gpunvme_cpu_mode},
    {"mmap", make_mmap_mode, nullptr},
    {"odirect", make_odirect_mode, nullptr},
    {"cufile", make_cufile_mode, nullptr},
};
const ModeKind* find_mode(const std::string& name) {
  for (const ModeKind& m : kModes)
    if (name == m.name) return &m;
  return nullptr;
}
std::string mode_names() {
  std::string names;
  for (const ModeKind& m : kModes) names += std::string(names.empty() ? "" : ", ") + m.name;
  return names;
}

using text::json_escape;

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

struct Options {
  std::vector<std::string> devices;  // explicit
  uint32_t drives = 1;
  std::string image = "/dev/shm/gpunvme-ls";
  uint32_t layers = 10;
  bool layers_given = false;
  uint64_t layer_bytes = kQ6kLayerBytes;
  std::string gguf;
  bool deployed = false;
  std::optional<uint64_t> compute_ns;  // nullopt: auto
  std::vector<std::string> modes;
  std::vector<std::string> profiles;
  bool pace_baselines = false;
  uint32_t passes = 1;
  uint32_t threads = 4;
  uint64_t chunk = 4ull << 20;
  uint32_t gpu_queues = 8;  // each is served by its own emulator thread: 4 were the emulator's limit on pcie5
  uint32_t cpu_queues = 2;
  uint64_t max_command = 0;
  std::string emu_opts;
  bool keep = false;
  guard::WritePermission permission;
  bool json = false;
  std::string json_out;
};

Options parse(const cli::Args& args) {
  Options o;
  o.devices = args.all("device");
  if (!args.positional().empty()) throw cli::UsageError("unexpected argument '" + args.positional().front() + "'");
  auto u32 = [&](const char* name, uint32_t def, uint32_t lo, uint32_t hi) {
    const uint64_t v = args.get_u64(name, def);
    if (v < lo || v > hi)
      throw cli::UsageError(std::string("--") + name + " must be " + std::to_string(lo) + ".." + std::to_string(hi));
    return uint32_t(v);
  };
  o.drives = u32("drives", o.devices.empty() ? 1 : uint32_t(o.devices.size()), 1, 4);
  if (!o.devices.empty() && o.devices.size() != o.drives)
    throw cli::UsageError("--drives " + std::to_string(o.drives) + " but " + std::to_string(o.devices.size()) +
                          " --device given (one --device per drive)");
  if (o.devices.size() > 4) throw cli::UsageError("at most 4 drives (--device given " + std::to_string(o.devices.size()) + " times)");
  o.image = args.get("image", o.image);
  o.layers_given = args.has("layers");
  o.layers = u32("layers", o.layers, 1, 100000);
  o.layer_bytes = args.get_size("layer-bytes", o.layer_bytes);
  if (o.layer_bytes < 4096) throw cli::UsageError("--layer-bytes must be at least 4K");
  o.gguf = args.get("gguf");
  o.deployed = args.has("deployed");
  if (o.deployed && o.gguf.empty()) throw cli::UsageError("--deployed needs --gguf FILE");
  if (!o.gguf.empty() && o.drives > 1) throw cli::UsageError("--gguf streams from one drive (--drives 1)");
  if (!o.gguf.empty() && args.has("layer-bytes")) throw cli::UsageError("--layer-bytes is for generated layouts, not --gguf");
  const std::string cu = args.get("compute-us", "auto");
  if (cu != "auto") {
    const double us = args.get_double("compute-us", 0);
    if (us > 60e6) throw cli::UsageError("--compute-us: '" + cu + "' is more than 60000000 microseconds");
    o.compute_ns = uint64_t(us * 1000.0);
  }
  o.modes = args.get_list("modes", "gpunvme-gpu,gpunvme-cpu,mmap,odirect,cufile");
  for (const auto& m : o.modes)
    if (!find_mode(m)) throw cli::UsageError("--modes: unknown mode '" + m + "' (" + mode_names() + ")");
  if (o.modes.empty()) throw cli::UsageError("--modes is empty");
  o.profiles = args.get_list("drive", "none,sn530,pcie4,pcie5");
  if (o.profiles.empty()) throw cli::UsageError("--drive is empty");
  for (const auto& p : o.profiles)
    if (!drive_profile_known(p))
      throw cli::UsageError("--drive: unknown profile '" + p + "' (known: " + drive_profile_names() + ")");
  o.pace_baselines = args.has("pace-baselines");
  o.passes = u32("passes", 1, 1, 100);
  o.threads = u32("threads", 4, 1, 256);
  o.chunk = args.get_size("chunk", o.chunk);
  if (o.chunk < 4096 || o.chunk % 4096) throw cli::UsageError("--chunk must be a multiple of 4K");
  o.gpu_queues = u32("gpu-queues", 8, 1, 64);
  o.cpu_queues = u32("cpu-queues", 2, 1, 64);
  o.max_command = args.get_size("max-command", 0);
  o.emu_opts = args.get("emu-opts");
  if (!o.emu_opts.empty() && o.emu_opts[0] == ',') o.emu_opts.erase(0, 1);
  o.keep = args.has("keep");
  o.permission = {args.has("allow-write"), args.has("force")};
  o.json = args.has("json");
  o.json_out = args.get("json-out");
  return o;
}

// ---- devices -------------------------------------------------------------------------------

struct DriveDev {
  std::string base;          // device string without drive=
  bool emu = false;
  bool generated = false;    // an image this run created
  std::string file;          // backing file (emu file-backed), else empty
};

std::string with_profile(const DriveDev& d, const std::string& profile) {
  return profile == "none" ? d.base : d.base + ",drive=" + profile;
}

struct Bringup {
  host::LockedController ctrl;  // exclusive when this run writes the drive, else shared (host/locked_open.h)
  std::unique_ptr<host::QueuePair> qp;
  std::unique_ptr<host::CpuIo> io;
  Bringup(const std::string& dev, bool writes) {
    host::ControllerOptions co;
    co.io_queues_wanted = 1;
    ctrl = host::open_for(writes, dev, co);
    qp = ctrl->create_io_queue_pair(1, std::min<uint32_t>(256, ctrl->max_queue_entries()));
    host::CpuIoOptions io_opts;
    io_opts.queue_depth = 64;
    io = std::make_unique<host::CpuIo>(*ctrl, *qp, 1, io_opts);
  }
  ~Bringup() {
    io.reset();
    try {
      ctrl->delete_io_queue_pair(*qp);
    } catch (...) {
    }
  }
};

// ---- generated layout ----------------------------------------------------------------------

constexpr uint64_t kBaseByte = 1ull << 20;  // layers start 1 MiB in, like deployed models

Layout generated_layout(uint32_t drives, uint32_t layers, uint64_t layer_bytes, uint32_t lba) {
  Layout L;
  L.drives = drives;
  L.lba_bytes = lba;
  L.align = 4096;
  const uint64_t stripe = (layer_bytes + uint64_t(drives) * lba - 1) / (uint64_t(drives) * lba) * lba;
  const uint64_t stripe_slot = (stripe + L.align - 1) / L.align * L.align;
  std::ostringstream w;
  w << "generated: " << layers << " layers x " << fmt("%.1f", double(stripe * drives) / 1e6) << " MB";
  if (drives > 1) w << " (" << drives << " stripes of " << fmt("%.1f", double(stripe) / 1e6) << " MB)";
  L.what = w.str();
  L.extents.assign(drives, {});
  for (uint32_t d = 0; d < drives; ++d) L.drive_base.push_back(d * stripe_slot);
  L.layer_buffer_bytes = stripe_slot * drives;
  for (uint32_t l = 0; l < layers; ++l) {
    std::vector<Span> spans;
    std::vector<Range> ranges;
    for (uint32_t d = 0; d < drives; ++d) {
      const uint64_t byte = kBaseByte + uint64_t(l) * stripe;
      model::Extent e;
      e.first_lba = byte / lba;
      e.lba_count = stripe / lba;
      e.byte_in_first = 0;
      e.byte_length = stripe;
      L.extents[d].push_back({e});
      spans.push_back(Span{d, byte, stripe, L.drive_base[d]});
      ranges.push_back(Range{L.drive_base[d], stripe, drive_tag(d, byte)});
    }
    L.spans.push_back(spans);
    L.ranges.push_back(ranges);
    L.layer_read_bytes.push_back(stripe * drives);
    L.layer_data_bytes.push_back(stripe * drives);
  }
  return L;
}

uint64_t generated_device_bytes(const Layout& L) {
  uint64_t end = 0;
  for (const auto& spans : L.spans)
    for (const Span& s : spans) end = std::max(end, s.device_byte + s.bytes);
  return (end + (1ull << 20) - 1) / (1ull << 20) * (1ull << 20);
}

// Expected checksums of the generated pattern, computed in parallel.
void expect_generated(Layout& L, ThreadPool& pool) {
  struct Piece {
    uint32_t layer;
    uint64_t tag, bytes;
  };
  std::vector<Piece> pieces;
  const uint64_t step = 64ull << 20;
  for (uint32_t l = 0; l < L.layers(); ++l)
    for (const Range& r : L.ranges[l])
      for (uint64_t off = 0; off < r.bytes; off += step) pieces.push_back({l, r.tag + off, std::min(step, r.bytes - off)});
  std::vector<uint64_t> sums(pieces.size());
  pool.run(pieces.size(), [&](uint64_t i) { sums[i] = pattern_checksum(pieces[i].tag, pieces[i].bytes); });
  L.expected.assign(L.layers(), 0);
  for (size_t i = 0; i < pieces.size(); ++i) L.expected[pieces[i].layer] += sums[i];
}

// Writes drive d's part of the generated pattern through the driver (CPU path, 64 MiB at a time).
void write_generated(const Layout& L, uint32_t d, Bringup& b, ThreadPool& pool) {
  const uint64_t chunk = 64ull << 20;
  host::DmaBuffer buf(b.ctrl->transport(), chunk);
  const uint32_t lba = b.io->lba_bytes();
  for (uint32_t l = 0; l < L.layers(); ++l)
    for (const Span& s : L.spans[l]) {
      if (s.drive != d) continue;
      for (uint64_t off = 0; off < s.bytes; off += chunk) {
        const uint64_t len = std::min(chunk, s.bytes - off);
        const uint64_t part = 8ull << 20;
        pool.run((len + part - 1) / part, [&](uint64_t i) {
          const uint64_t o = i * part;
          fill_pattern(buf.as<uint8_t>() + o, drive_tag(d, s.device_byte + off + o), std::min(part, len - o));
        });
        b.io->write((s.device_byte + off) / lba, len / lba, buf, 0);
      }
    }
  b.io->flush();
}

// A kept image is reused when the first and last 4 KiB of every span already hold the pattern
// (the full check happens anyway: every mode verifies every byte).
bool image_holds_pattern(const Layout& L, uint32_t d, const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::vector<uint8_t> got(4096), want(4096);
  bool ok = true;
  for (uint32_t l = 0; ok && l < L.layers(); ++l)
    for (const Span& s : L.spans[l]) {
      if (s.drive != d) continue;
      for (uint64_t at : {s.device_byte, s.device_byte + s.bytes - 4096}) {
        fill_pattern(want.data(), drive_tag(d, at), 4096);
        if (pread(fd, got.data(), 4096, off_t(at)) != 4096 || got != want) ok = false;
      }
    }
  close(fd);
  return ok;
}

// ---- GGUF layout ---------------------------------------------------------------------------

// The write guard's signature check at LBA 0 and at 1 MiB (where both layouts start).
void refuse_over_signatures(Bringup& b, const guard::WritePermission& permission) {
  guard::check_no_signatures(model::cpu_block_io(*b.ctrl, *b.io, b.ctrl->transport().name()),
                             kBaseByte / b.io->lba_bytes(), permission);
}

void write_gguf(const std::string& path, Bringup& b) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  struct stat st{};
  fstat(fd, &st);
  const uint64_t size = uint64_t(st.st_size);
  const uint32_t lba = b.io->lba_bytes();
  const uint64_t start = kBaseByte / lba;
  const uint64_t blocks = (size + lba - 1) / lba;
  if (start + blocks > b.io->blocks()) {
    close(fd);
    throw std::runtime_error("the model (" + std::to_string(size >> 20) + " MiB) does not fit the namespace at 1 MiB (" +
                             std::to_string((b.io->blocks() * lba) >> 20) + " MiB); use a larger size= in --device");
  }
  const uint64_t chunk = 64ull << 20;
  host::DmaBuffer buf(b.ctrl->transport(), chunk);
  for (uint64_t off = 0; off < size; off += chunk) {
    const uint64_t len = std::min(chunk, size - off);
    const ssize_t got = pread(fd, buf.host(), len, off_t(off));
    if (got != ssize_t(len)) {
      close(fd);
      throw std::runtime_error("short read of " + path);
    }
    const uint64_t padded = (len + lba - 1) / lba * lba;
    std::memset(buf.as<uint8_t>() + len, 0, padded - len);
    b.io->write(start + off / lba, padded / lba, buf, 0);
  }
  b.io->flush();
  close(fd);
}

struct GgufInfo {
  uint64_t start_byte = 0;
  std::string name;
};

Layout gguf_layout(const std::string& path, Bringup& b, uint32_t max_layers, GgufInfo* info) {
  const model::BlockIo bio = model::cpu_block_io(*b.ctrl, *b.io, b.ctrl->transport().name());
  const model::DetectedModel det = model::detect_model(bio);
  if (det.kind == model::DetectedModel::Kind::kNone)
    throw std::runtime_error("no model found on " + b.ctrl->transport().name() +
                             " (write it with `gpunvme deploy`, dd it 1 MiB in, or leave out --deployed)");
  const gguf::GgufFile file = model::read_model_header(bio, det);
  const model::LbaMap map(file, b.io->lba_bytes(), det.start_lba);
  info->start_byte = det.start_lba * b.io->lba_bytes();
  info->name = file.model_name() + " (" + file.architecture() + ")";
  auto per_layer = plan::layer_extents(map);
  Layout L;
  L.drives = 1;
  L.lba_bytes = b.io->lba_bytes();
  L.align = 4096;
  L.drive_base = {0};
  L.extents.assign(1, {});
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  std::vector<uint8_t> tmp;
  uint64_t total = 0;
  for (auto& exts : per_layer) {
    if (exts.empty()) continue;
    if (L.layers() >= max_layers) break;
    uint64_t end = 0;
    const auto dest = plan::pack_extents(exts, L.lba_bytes, L.align, 0, &end);
    L.layer_buffer_bytes = std::max(L.layer_buffer_bytes, (end + L.align - 1) / L.align * L.align);
    std::vector<Span> spans;
    std::vector<Range> ranges;
    uint64_t read = 0, data = 0, sum = 0;
    for (size_t i = 0; i < exts.size(); ++i) {
      const model::Extent& e = exts[i];
      const uint64_t dev = e.first_lba * L.lba_bytes;
      spans.push_back(Span{0, dev, e.lba_count * L.lba_bytes, dest[i]});
      const Range r{dest[i] + e.byte_in_first, e.byte_length, dev + e.byte_in_first - info->start_byte};
      if (r.dest % 8)
        throw std::runtime_error("GGUF tensor data at file offset " + std::to_string(r.tag) +
                                 " is not 8-byte aligned; layer_stream's checksum needs that");
      ranges.push_back(r);
      read += e.lba_count * L.lba_bytes;
      data += e.byte_length;
      // Expected checksum from the file itself (tags are file offsets, so the range starts at 0 here).
      tmp.resize(r.bytes);
      if (pread(fd, tmp.data(), r.bytes, off_t(r.tag)) != ssize_t(r.bytes)) {
        close(fd);
        throw std::runtime_error("short read of " + path + " at " + std::to_string(r.tag));
      }
      const Range local{0, r.bytes, r.tag};
      sum += host_checksum(tmp.data(), std::span<const Range>(&local, 1));
    }
    L.extents[0].push_back(exts);
    L.spans.push_back(spans);
    L.ranges.push_back(ranges);
    L.layer_read_bytes.push_back(read);
    L.layer_data_bytes.push_back(data);
    L.expected.push_back(sum);
    total += read;
  }
  close(fd);
  if (L.layers() == 0) throw std::runtime_error("the model on the device has no layers (blk.N.* tensors)");
  L.what = "GGUF " + info->name + ": " + std::to_string(L.layers()) + " layers, " + fmt("%.1f", double(total) / 1e6) +
           " MB (largest " + fmt("%.1f", double(L.layer_buffer_bytes) / 1e6) + " MB)";
  return L;
}

// ---- runs ----------------------------------------------------------------------------------

struct Row {
  std::string profile, mode;
  bool ran = false;
  std::string unavailable, error, note, cache;
  bool verified = true;
  std::string mismatch;
  uint32_t layers = 0;
  uint64_t bytes = 0;
  double io_s = 0, read_s = 0, pipe_s = 0, compute_s = 0, copy_s = 0;
  uint64_t compute_ns = 0;
  host::RecoveryStats recovery;  // summed over the timed passes
  double limit_bps = 0;  // drives x modeled limit, 0 = unlimited
  double gbps_io() const { return io_s > 0 ? double(bytes) / io_s / 1e9 : 0; }
  double gbps_read() const { return read_s > 0 ? double(bytes) / read_s / 1e9 : 0; }
  double gbps_pipe() const { return pipe_s > 0 ? double(bytes) / pipe_s / 1e9 : 0; }
  double layer_ms() const { return layers ? io_s * 1e3 / layers : 0; }
  double hidden() const { return io_s > 0 ? std::clamp(1.0 - (pipe_s - compute_s) / io_s, 0.0, 1.0) : 0; }
  double tok_s(bool compute_auto) const {
    const double gbps = gbps_io();
    if (gbps <= 0) return 0;
    const double t_io = double(kQ6kLayerBytes) / (gbps * 1e9);
    const double t_c = compute_auto ? 0 : double(compute_ns) * 1e-9;
    return 1.0 / (kQ6kLayers * std::max(t_io, t_c));
  }
  double tok_s_meas() const { return gbps_pipe() * 1e9 / (double(kQ6kLayers) * kQ6kLayerBytes); }
  // The read stage against the drives' limit (the copy to the GPU is not the drives' business).
  double efficiency() const { return limit_bps > 0 ? (read_s > 0 ? gbps_read() : gbps_io()) * 1e9 / limit_bps : 0; }
};

bool check_sums(const Layout& L, uint32_t n, const ConsumerPass& p, Row& row, const char* pass) {
  bool ok = p.sums.size() >= n;
  std::string msg;
  int shown = 0;
  for (uint32_t l = 0; l < n && l < p.sums.size(); ++l)
    if (p.sums[l] != L.expected[l]) {
      ok = false;
      if (shown++ < 3) {
        char b[160];
        std::snprintf(b, sizeof b, "%s layer %u: checksum %016llx, expected %016llx; ", pass, l,
                      (unsigned long long)p.sums[l], (unsigned long long)L.expected[l]);
        msg += b;
      }
    }
  if (!ok) {
    row.verified = false;
    if (row.mismatch.empty()) row.mismatch = msg.empty() ? std::string(pass) + ": checksums missing" : msg;
  }
  return ok;
}

// ---- the run, step by step ----------------------------------------------------------------------

// Images this run generated: deleted when the run ends, whichever way, unless --keep.
struct CreatedImages {
  std::vector<std::string> files;
  bool keep = false;
  ~CreatedImages() {
    if (!keep)
      for (const auto& f : files) unlink(f.c_str());
  }
};

// The drives of a generated layout (or, with --gguf, an image sized for the model): image files
// under --image, reused with --keep where they already hold the pattern (`reuse`).
std::vector<DriveDev> image_drives(const Options& o, const Layout& L, uint32_t n_drives, std::vector<bool>& reuse,
                                   CreatedImages& created) {
  const bool generated = o.gguf.empty();
  const std::string extra = o.emu_opts.empty() ? "" : "," + o.emu_opts;
  uint64_t bytes = 0;
  if (generated) {
    bytes = generated_device_bytes(L);
  } else {
    struct stat st{};
    if (stat(o.gguf.c_str(), &st) != 0) throw std::runtime_error("cannot stat " + o.gguf + ": " + std::strerror(errno));
    bytes = (kBaseByte + uint64_t(st.st_size) + (2ull << 20)) / (1ull << 20) * (1ull << 20);
    if (o.deployed) throw std::runtime_error("--deployed needs --device (the namespace the model is on)");
  }
  struct statvfs vfs{};
  const std::string dir = o.image.substr(0, o.image.rfind('/') == std::string::npos ? 0 : o.image.rfind('/') + 1);
  if (statvfs(dir.empty() ? "." : dir.c_str(), &vfs) == 0) {
    const double avail = double(vfs.f_bavail) * double(vfs.f_frsize);
    if (avail < double(bytes) * n_drives * 1.02)
      throw std::runtime_error("not enough space for the images under " + (dir.empty() ? "." : dir) + ": need " +
                               fmt("%.1f", double(bytes) * n_drives / 1e9) + " GB, " + fmt("%.1f", avail / 1e9) +
                               " GB free (fewer --layers, a smaller --layer-bytes, or --image elsewhere)");
  }
  std::vector<DriveDev> devs;
  for (uint32_t d = 0; d < n_drives; ++d) {
    DriveDev dv;
    dv.emu = true;
    dv.generated = true;
    dv.file = o.image + "-d" + std::to_string(d) + ".img";
    struct stat st{};
    if (o.keep && generated && stat(dv.file.c_str(), &st) == 0 && uint64_t(st.st_size) == bytes)
      reuse[d] = image_holds_pattern(L, d, dv.file);
    // Defaults for the keys --emu-opts leaves out (a key given twice is an error).
    std::string keys = "size=" + std::to_string(bytes);
    const uint32_t q = std::max(o.gpu_queues, o.cpu_queues);
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"lba", "4096"},
                                     {"queues", std::to_string(std::max<uint32_t>(8, q))},
                                     {"threads", std::to_string(q)}})
      if (("," + o.emu_opts).find("," + key + "=") == std::string::npos) keys += "," + key + "=" + value;
    dv.base = "emu:" + dv.file + "," + keys + extra;
    created.files.push_back(dv.file);
    devs.push_back(dv);
  }
  return devs;
}

// The drives given with --device, each checked for what this run writes onto it.
std::vector<DriveDev> given_drives(const Options& o) {
  const bool generated = o.gguf.empty();
  std::vector<DriveDev> devs;
  for (const auto& s : o.devices) {
    DriveDev dv;
    dv.base = s;
    dv.emu = emu::is_emu_device(s);
    if (dv.emu) {
      const emu::ControllerConfig cfg = emu::parse_emu_device(s);
      if (!cfg.namespaces.empty() && cfg.namespaces[0].backing == emu::Backing::kFile) dv.file = cfg.namespaces[0].path;
      if (s.find("drive=") != std::string::npos)
        throw cli::UsageError("--device " + s + ": leave drive= out, --drive PROFILE adds it per run");
    }
    if (generated || !o.deployed)
      guard::check_write_allowed(s, o.permission,
                                 std::string("this run writes the ") + (generated ? "generated layout" : "GGUF") +
                                     " onto it (--gguf FILE --deployed reads a model that is there already)");
    devs.push_back(dv);
  }
  return devs;
}

// What setup leaves for the modes: the layout with its expected checksums, the drives' locks.
struct Prepared {
  Layout L;
  GgufInfo gi;
  uint64_t max_transfer = 0;
  std::vector<host::DeviceLock> locks;  // every drive's, to the end of the run: the modes open the drives again
  double setup_s = 0;
};

// Brings every drive up once: writes the generated pattern (unless reused) or the GGUF (unless
// --deployed), reads the GGUF's layout back, and computes the expected checksums.
Prepared prepare(const Options& o, const std::vector<DriveDev>& devs, const std::vector<bool>& reuse, Layout L,
                 ThreadPool& pool) {
  const bool generated = o.gguf.empty();
  const uint32_t n_drives = uint32_t(devs.size());
  Prepared p;
  const auto t_setup = Clock::now();
  for (uint32_t d = 0; d < n_drives; ++d) {
    Bringup b(devs[d].base, generated ? !reuse[d] : !o.deployed);
    p.locks.push_back(std::move(b.ctrl.lock));
    const uint32_t lba = b.io->lba_bytes();
    p.max_transfer = b.ctrl->max_transfer_bytes();
    if (generated) {
      if (lba != L.lba_bytes) {
        if (d != 0) throw std::runtime_error("all drives must have the same LBA size");
        L = generated_layout(n_drives, o.layers, o.layer_bytes, lba);
      }
      const uint64_t need = generated_device_bytes(L);
      if (need > b.io->blocks() * lba)
        throw std::runtime_error(b.ctrl->transport().name() + " holds " + std::to_string((b.io->blocks() * lba) >> 20) +
                                 " MiB; the layout needs " + std::to_string(need >> 20) + " MiB per drive");
      if (!reuse[d]) {
        refuse_over_signatures(b, o.permission);
        write_generated(L, d, b, pool);
      }
    } else {
      if (!o.deployed) {
        refuse_over_signatures(b, o.permission);
        write_gguf(o.gguf, b);
      }
      L = gguf_layout(o.gguf, b, o.layers_given ? o.layers : UINT32_MAX, &p.gi);
    }
  }
  if (generated) expect_generated(L, pool);
  p.setup_s = std::chrono::duration<double>(Clock::now() - t_setup).count();
  p.L = std::move(L);
  return p;
}

// The files every mode reads (the emulator reads its image through the page cache too) and their
// page-cache state, dropped before every pass where they are not tmpfs.
struct PageCache {
  std::vector<std::string> files;
  bool all_tmpfs = false;
  std::string fs_desc;

  explicit PageCache(const std::vector<BaselineFile>& bfiles) {
    for (const auto& f : bfiles) files.push_back(f.path);
    all_tmpfs = !files.empty();
    for (const auto& f : files) {
      const CacheState cs = cache_state(f);
      all_tmpfs = all_tmpfs && cs.tmpfs;
      if (fs_desc.empty()) fs_desc = cs.fs;
    }
  }
  std::string before_pass() const {
    if (files.empty()) return "n/a";
    if (all_tmpfs) return "tmpfs: RAM, always hot";
    double res = 0;
    for (const auto& f : files) {
      drop_cache(f);
      res += std::max(0.0, cache_state(f).resident);
    }
    return "dropped, " + fmt("%.0f", 100.0 * res / files.size()) + "% still cached";
  }
};

// Everything a (profile, mode) row needs.
struct RunContext {
  const Options& o;
  const Layout& L;
  const std::vector<DriveDev>& devs;
  BaselineContext bctx;      // files, threads, chunk, layout, consumer
  std::string baseline_why;  // why the baselines cannot run, or empty
  const PageCache& cache;
  uint32_t n_drives() const { return uint32_t(devs.size()); }
};

// The GPU consumer where a GPU is usable, else the host's; `note` says why not.
std::unique_ptr<Consumer> make_consumer(const Layout& L, std::string& note) {
  std::unique_ptr<Consumer> consumer;
#if GPUNVME_HAVE_CUDA
  std::string why;
  if (host::cuda_device_available(&why)) consumer = make_gpu_consumer(L);
  else note = "no GPU: " + why;
#else
  note = "this build has no CUDA";
#endif
  if (!consumer) consumer = make_host_consumer(L);
  return consumer;
}

void print_header(const RunContext& c, const std::vector<bool>& reuse, const Consumer& consumer,
                  const std::string& consumer_note, double setup_s) {
  const Options& o = c.o;
  std::printf("layer_stream: %s, %u drive(s); 70B Q6_K layer = %llu B, 80 layers per token\n", text::printable(c.L.what).c_str(),
              c.n_drives(), (unsigned long long)kQ6kLayerBytes);
  for (uint32_t d = 0; d < c.n_drives(); ++d)
    std::printf("  drive %u: %s%s\n", d, c.devs[d].base.c_str(), reuse[d] ? "  (kept image reused)" : "");
  std::printf("  consumer: %s%s%s\n", consumer.describe().c_str(), consumer_note.empty() ? "" : "; ", consumer_note.c_str());
  std::printf("  compute per layer: %s; setup (pattern written, checksums) %.1f s\n",
              o.compute_ns ? (fmt("%.0f", double(*o.compute_ns) / 1e3) + " us").c_str()
                           : "auto (= the mode's own I/O time per layer)",
              setup_s);
  const auto& files = c.cache.files;
  std::printf("  files: %s%s\n", files.empty() ? "none" : c.cache.fs_desc.c_str(),
              c.cache.all_tmpfs ? " - the page cache is the file: every read is a RAM copy, DONTNEED does nothing"
                                : (files.empty() ? "" : " - page cache dropped (posix_fadvise DONTNEED) before every pass"));
  std::fflush(stdout);
}

// The modeled limit of `profile` for these reads: per drive, its bytes and commands of all layers;
// the slowest drive bounds the lockstep. 0 for profile none.
double profile_limit(const RunContext& c, const std::string& profile, uint64_t max_transfer) {
  if (profile == "none") return 0;
  const Options& o = c.o;
  const uint32_t n = c.L.layers();
  const uint64_t cmd_bytes = std::max<uint64_t>(4096, o.max_command ? std::min(o.max_command, max_transfer ? max_transfer : o.max_command)
                                                                 : (max_transfer ? max_transfer : (1ull << 20)));
  double floor_s = 0;
  for (uint32_t d = 0; d < c.n_drives(); ++d) {
    uint64_t db = 0, dc = 0;
    for (uint32_t l = 0; l < n; ++l)
      for (const Span& s : c.L.spans[l])
        if (s.drive == d) db += s.bytes, dc += (s.bytes + cmd_bytes - 1) / cmd_bytes;
    const double bps = modeled_limit_bps(profile, db, dc);
    if (bps > 0) floor_s = std::max(floor_s, double(db) / bps);
  }
  return floor_s > 0 ? double(c.L.read_bytes(n)) / floor_s : 0;
}

// The mode `kind` on `profile`, built from the table (a paced baseline shares the profile's pacer).
std::unique_ptr<Mode> make_mode(const RunContext& c, const ModeKind& kind, const std::string& profile,
                                std::shared_ptr<Pacer>& pacer) {
  if (kind.baseline) {
    if (!c.baseline_why.empty()) throw Unavailable(c.baseline_why);
    BaselineContext b = c.bctx;
    if (profile != "none") {
      if (!pacer) pacer = std::make_shared<Pacer>(profile, c.n_drives());
      b.pacer = pacer;
    }
    return kind.baseline(b);
  }
  GpunvmeContext g;
  g.layout = &c.L;
  g.consumer = c.bctx.consumer;
  g.gpu_queues = c.o.gpu_queues;
  g.cpu_queues = c.o.cpu_queues;
  g.max_command_bytes = c.o.max_command;
  for (uint32_t d = 0; d < c.n_drives(); ++d) {
    if (profile != "none" && !c.devs[d].emu)
      throw Unavailable("modeled drives need emulated devices; " + c.devs[d].base + " is real");
    g.devices.push_back(with_profile(c.devs[d], profile));
  }
  return kind.gpunvme(g);
}

// A 2-layer warm-up (verified, not timed), then --passes timed passes without and with compute; the
// best of each goes into the row.
void measure(const RunContext& c, Mode& m, Row& row) {
  const Options& o = c.o;
  const Layout& L = c.L;
  const uint32_t n = L.layers();
  row.note = m.note();
  const uint32_t warm = std::min<uint32_t>(2, n);
  check_sums(L, warm, m.stream(warm, 0).consumer, row, "warm-up");
  double best_io = 1e300, best_read = 1e300, best_pipe = 1e300;
  for (uint32_t p = 0; p < o.passes; ++p) {
    row.cache = c.cache.before_pass();
    const PassResult io = m.stream(n, 0);
    check_sums(L, n, io.consumer, row, "I/O pass");
    row.recovery += io.recovery;
    if (!io.note.empty()) row.note = io.note;
    best_io = std::min(best_io, io.wall_s);
    if (io.landed_s > 0) best_read = std::min(best_read, io.landed_s);
    const uint64_t cns = o.compute_ns ? *o.compute_ns : uint64_t(io.wall_s / n * 1e9);
    c.cache.before_pass();
    const PassResult pp = m.stream(n, cns);
    check_sums(L, n, pp.consumer, row, "compute pass");
    row.recovery += pp.recovery;
    if (pp.wall_s < best_pipe) {
      best_pipe = pp.wall_s;
      row.compute_s = pp.consumer.compute_s;
      row.copy_s = pp.consumer.copy_s;
      row.compute_ns = cns;
    }
  }
  row.io_s = best_io;
  row.read_s = best_read < 1e300 ? best_read : 0;
  row.pipe_s = best_pipe;
  row.ran = true;
}

void print_row_line(const Row& row) {
  const char* profile = row.profile.c_str();
  const char* mode = row.mode.c_str();
  if (row.ran) {
    std::printf("  [%s] %-11s read %7.2f GB/s, into the GPU %7.2f GB/s, with compute %7.2f GB/s, %s\n", profile, mode,
                row.gbps_read(), row.gbps_io(), row.gbps_pipe(), row.verified ? "verified" : "MISMATCH");
    if (row.recovery.any())
      std::printf("  [%s] %-11s recovery: %s\n", profile, mode, host::recovery_text(row.recovery).c_str());
  } else if (!row.unavailable.empty())
    std::printf("  [%s] %-11s not available: %s\n", profile, mode, row.unavailable.c_str());
  else
    std::printf("  [%s] %-11s FAILED: %s\n", profile, mode, row.error.c_str());
  if (!row.mismatch.empty()) std::printf("      %s\n", row.mismatch.c_str());
  std::fflush(stdout);
}

// Every (profile, mode) row, in order; a baseline on a modeled drive only with --pace-baselines.
std::vector<Row> run_rows(const RunContext& c, uint64_t max_transfer) {
  std::vector<Row> rows;
  const uint32_t n = c.L.layers();
  for (const auto& profile : c.o.profiles) {
    const double limit = profile_limit(c, profile, max_transfer);
    std::shared_ptr<Pacer> pacer;
    for (const auto& mode : c.o.modes) {
      const ModeKind& kind = *find_mode(mode);
      if (kind.baseline && profile != "none" && !c.o.pace_baselines) continue;
      Row row;
      row.profile = profile;
      row.mode = mode;
      row.layers = n;
      row.bytes = c.L.read_bytes(n);
      row.limit_bps = limit;
      try {
        measure(c, *make_mode(c, kind, profile, pacer), row);
      } catch (const Unavailable& e) {
        row.unavailable = e.what();
      } catch (const std::exception& e) {
        row.error = e.what();
        row.verified = false;
      }
      // Bytes that did not verify make the run's speed meaningless: report the mismatch, no figures.
      if (row.ran && !row.verified) {
        row.ran = false;
        row.error = "bytes did not verify (no figures): " + row.mismatch;
      }
      if (!c.o.json) print_row_line(row);
      rows.push_back(row);
    }
  }
  return rows;
}

// The report: the rows, and what the JSON and the tables say about the run as a whole.
struct Report {
  const RunContext& c;
  const std::vector<Row>& rows;
  std::string consumer;  // described, with its note
  double setup_s = 0;
  bool all_ok = true;
  bool compute_auto() const { return !c.o.compute_ns; }
  const Row* baseline_of(const std::string& profile, const std::string& mode) const {
    for (const Row& r : rows)
      if (r.profile == profile && r.mode == mode && r.ran && r.verified) return &r;
    return nullptr;
  }
};

void emit_json(FILE* jf, const Report& rep) {
  const Layout& L = rep.c.L;
  const uint32_t n = L.layers();
  const bool compute_auto = rep.compute_auto();
  std::fprintf(jf, "{\"layout\":\"%s\",\"drives\":%u,\"layers\":%u,\"bytes\":%llu,\"q6k_layer_bytes\":%llu,"
              "\"consumer\":\"%s\",\"compute\":\"%s\",\"files\":\"%s\",\"tmpfs\":%s,\"setup_s\":%.2f,\"rows\":[",
              json_escape(L.what).c_str(), rep.c.n_drives(), n, (unsigned long long)L.read_bytes(n),
              (unsigned long long)kQ6kLayerBytes, json_escape(rep.consumer).c_str(),
              compute_auto ? "auto" : fmt("%.0f", double(*rep.c.o.compute_ns) / 1e3).c_str(),
              json_escape(rep.c.cache.fs_desc).c_str(), rep.c.cache.all_tmpfs ? "true" : "false", rep.setup_s);
  bool first = true;
  for (const Row& r : rep.rows) {
    std::fprintf(jf, "%s{\"drive\":\"%s\",\"mode\":\"%s\",\"ran\":%s", first ? "" : ",", r.profile.c_str(), r.mode.c_str(),
                r.ran ? "true" : "false");
    first = false;
    if (!r.unavailable.empty()) std::fprintf(jf, ",\"unavailable\":\"%s\"", json_escape(r.unavailable).c_str());
    if (!r.error.empty()) std::fprintf(jf, ",\"error\":\"%s\"", json_escape(r.error).c_str());
    if (r.ran) {
      std::fprintf(jf, ",\"read_s\":%.6f,\"read_gbps\":%.4f", r.read_s, r.gbps_read());
      std::fprintf(jf, ",\"verified\":%s,\"io_s\":%.6f,\"io_gbps\":%.4f,\"layer_io_ms\":%.4f,\"pipe_s\":%.6f,\"pipe_gbps\":%.4f,"
                  "\"compute_us_per_layer\":%.1f,\"compute_s\":%.6f,\"copy_s\":%.6f,\"hidden\":%.4f,\"hidden_max\":%.4f,"
                  "\"tok_s\":%.4f,\"tok_s_meas\":%.4f",
                  r.verified ? "true" : "false", r.io_s, r.gbps_io(), r.layer_ms(), r.pipe_s, r.gbps_pipe(),
                  double(r.compute_ns) / 1e3, r.compute_s, r.copy_s, r.hidden(), 1.0 - 1.0 / n, r.tok_s(compute_auto),
                  r.tok_s_meas());
      if (r.limit_bps > 0)
        std::fprintf(jf, ",\"limit_gbps\":%.4f,\"efficiency\":%.4f,\"efficiency_target_met\":%s", r.limit_bps / 1e9,
                    r.efficiency(), r.efficiency() >= 0.97 ? "true" : "false");
      std::fprintf(jf, ",\"cache\":\"%s\",\"note\":\"%s\"", json_escape(r.cache).c_str(), json_escape(r.note).c_str());
      std::fprintf(jf, ",\"recovery\":%s", host::recovery_json(r.recovery).c_str());
      std::fprintf(jf, ",\"ratios\":{");
      bool f2 = true;
      for (const char* b : {"mmap", "odirect", "cufile"})
        if (const Row* br = rep.baseline_of(r.profile, b); br && r.mode != b && br->gbps_io() > 0) {
          std::fprintf(jf, "%s\"%s\":%.3f", f2 ? "" : ",", b, r.gbps_io() / br->gbps_io());
          f2 = false;
        }
      std::fprintf(jf, "}");
    }
    if (!r.mismatch.empty()) std::fprintf(jf, ",\"mismatch\":\"%s\"", json_escape(r.mismatch).c_str());
    std::fprintf(jf, "}");
  }
  std::fprintf(jf, "],\"ok\":%s}\n", rep.all_ok ? "true" : "false");
}

// One table per drive profile, then the notes under them.
void print_tables(const Report& rep) {
  const Options& o = rep.c.o;
  const uint32_t n = rep.c.L.layers();
  const uint32_t n_drives = rep.c.n_drives();
  const bool compute_auto = rep.compute_auto();
  const auto& rows = rep.rows;
  std::printf("\n");
  for (const auto& profile : o.profiles) {
    const Row* any = nullptr;
    for (const Row& r : rows)
      if (r.profile == profile) any = &r;
    if (!any) continue;
    if (profile == "none")
      std::printf("drive none: unthrottled emulator, %s\n",
                  rep.c.cache.all_tmpfs ? "the \"drive\" is RAM (tmpfs image); baselines read the same RAM-backed file"
                                        : "the \"drive\" is the image file");
    else
      std::printf("drive %s: modeled, %.2f GB/s rated per drive; limit for these reads %.2f GB/s (%u drive%s)%s\n",
                  profile.c_str(), drive_read_bandwidth(profile) / 1e9, any->limit_bps / 1e9, n_drives,
                  n_drives > 1 ? "s" : "", o.pace_baselines ? "; baselines paced by the same model" : "");
    std::printf("  %-11s %9s %8s %8s %9s %10s %7s %7s %10s %6s", "mode", "read GB/s", "GPU GB/s", "layer ms",
                "pipe GB/s", "compute ms", "hidden", "tok/s", "tok/s meas", "eff");
    std::vector<std::string> bl;
    for (const char* b : {"mmap", "odirect", "cufile"})
      if (rep.baseline_of(profile, b)) bl.push_back(b);
    for (const auto& b : bl) std::printf(" %9s", ("vs " + b).c_str());
    std::printf("  bytes\n");
    for (const Row& r : rows) {
      if (r.profile != profile) continue;
      if (!r.ran) {
        std::printf("  %-11s %s\n", r.mode.c_str(),
                    (r.unavailable.empty() ? "FAILED: " + r.error : "not available: " + r.unavailable).c_str());
        continue;
      }
      std::printf("  %-11s %9.2f %8.2f %8.2f %9.2f %10.2f %6.1f%% %7.3f %10.3f %6s", r.mode.c_str(), r.gbps_read(),
                  r.gbps_io(), r.layer_ms(),
                  r.gbps_pipe(), r.layers ? r.compute_s * 1e3 / r.layers : 0.0, 100 * r.hidden(), r.tok_s(compute_auto),
                  r.tok_s_meas(), r.limit_bps > 0 ? (fmt("%.1f", 100 * r.efficiency()) + "%").c_str() : "-");
      for (const auto& b : bl) {
        const Row* br = rep.baseline_of(profile, b);
        std::printf(" %9s", br && br->gbps_io() > 0 && r.mode != b ? (fmt("%.2f", r.gbps_io() / br->gbps_io()) + "x").c_str() : "-");
      }
      std::printf("  %s\n", r.verified ? "verified" : "MISMATCH");
      if (!r.note.empty()) std::printf("  %-11s   (%s; cache: %s)\n", "", r.note.c_str(), r.cache.c_str());
    }
  }
  std::printf("\nhidden: at most %.1f%% here (1 - 1/%u layers). tok/s: 70B Q6_K, 1/(80 x max(%.1f MB / GPU GB/s, "
              "t_compute)), t_compute = %s; tok/s meas: pipe GB/s / 56.16 GB. eff target >= 97%%.\n",
              100.0 * (1.0 - 1.0 / n), n, kQ6kLayerBytes / 1e6,
              compute_auto ? "0 (auto: compute assumed hidden)" : (fmt("%.0f", double(*o.compute_ns) / 1e3) + " us").c_str());
  for (const Row& r : rows)
    if (r.ran && r.limit_bps > 0 && r.efficiency() < 0.97 && r.mode.rfind("gpunvme", 0) == 0)
      std::printf("below the 97%% efficiency target: %s on %s (%.1f%%)\n", r.mode.c_str(), r.profile.c_str(),
                  100 * r.efficiency());
  std::printf("%s\n", rep.all_ok ? "OK: every layer of every mode verified" : "FAIL: see MISMATCH / FAILED above");
}

int run(int argc, char** argv) {
  const cli::Args args(argc, argv, 1,
                       {"device", "drives", "image", "layers", "layer-bytes", "gguf", "compute-us", "modes", "drive",
                        "passes", "threads", "chunk", "gpu-queues", "cpu-queues", "max-command", "emu-opts", "json-out"},
                       {"deployed", "pace-baselines", "keep", "allow-write", "force", "json", "help"}, {"device"});
  if (args.help_asked()) return args.print_help("layer_stream", help());
  const Options o = parse(args);
  CreatedImages created;
  created.keep = o.keep;

  // ---- devices and layout ----
  const bool generated = o.gguf.empty();
  const uint32_t n_drives = o.devices.empty() ? o.drives : uint32_t(o.devices.size());
  std::vector<bool> reuse(n_drives, false);
  ThreadPool pool(std::clamp<uint32_t>(std::thread::hardware_concurrency(), 1, 16));
  Layout L0;
  if (generated) L0 = generated_layout(n_drives, o.layers, o.layer_bytes, 4096);
  const std::vector<DriveDev> devs = o.devices.empty() ? image_drives(o, L0, n_drives, reuse, created) : given_drives(o);
  // --json-out on a device of the run is refused before anything is written (runtime/guard/output_file.h).
  std::vector<std::string> run_devices;
  for (const DriveDev& dv : devs) run_devices.push_back(dv.base);
  guard::OutputFile json_file =
      o.json_out.empty() ? guard::OutputFile() : guard::OutputFile::open(o.json_out, run_devices, "--json-out");
  const Prepared prep = prepare(o, devs, reuse, std::move(L0), pool);
  const Layout& L = prep.L;

  // ---- what the baselines read, and the consumer ----
  BaselineContext bctx;
  bctx.layout = &L;
  bctx.threads = o.threads;
  bctx.chunk = o.chunk;
  std::string baseline_why;
  for (uint32_t d = 0; d < n_drives; ++d) {
    if (!devs[d].file.empty()) bctx.files.push_back({devs[d].file, 0});
    else if (!generated) bctx.files.push_back({o.gguf, prep.gi.start_byte});
    else baseline_why = "no file holds the bytes of " + devs[d].base + " (baselines need an emu: file-backed namespace)";
  }
  const PageCache cache(bctx.files);
  std::string consumer_note;
  const std::unique_ptr<Consumer> consumer = make_consumer(L, consumer_note);
  bctx.consumer = consumer.get();
  const RunContext c{o, L, devs, bctx, baseline_why, cache};
  if (!o.json) print_header(c, reuse, *consumer, consumer_note, prep.setup_s);

  // ---- every (profile, mode), then the report ----
  const std::vector<Row> rows = run_rows(c, prep.max_transfer);
  Report rep{c, rows, consumer->describe() + (consumer_note.empty() ? "" : "; " + consumer_note), prep.setup_s};
  for (const Row& r : rows) rep.all_ok = rep.all_ok && r.verified && r.error.empty();
  if (json_file) {
    emit_json(json_file.stream(), rep);
    json_file.commit();
  }
  if (o.json) emit_json(stdout, rep);
  else print_tables(rep);
  return rep.all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return cli::run_tool("layer_stream", help(), [&] { return run(argc, argv); }); }
