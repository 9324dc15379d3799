// Shared by the examples: a generated GGUF-like model (dense or MoE) or a real GGUF file, written
// onto namespace 1 at the 1 MiB default (as `dd bs=1M seek=1` would), then found again from the
// device alone (detect_model + the GGUF header read through the driver) and mapped to LBAs.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "driver/compiler.h"
#include "host/cpu_io.h"
#include "host/cuda_device.h"
#include "host/dma_memory.h"
#include "host/io_patterns.h"
#include "host/open_device.h"
#include "host/text/human_bytes.h"
#include "runtime/cli/args.h"
#include "runtime/gguf/gguf_builder.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/guard/write_guard.h"
#include "runtime/io/cpu_block_io.h"
#include "runtime/model/block_io.h"
#include "runtime/model/detect.h"
#include "runtime/model/lba_map.h"

namespace example {

// Order-independent, position-weighted byte sum: the GPU adds it up in any order.
GPUNVME_HD inline uint64_t toy_term(uint8_t byte, uint64_t i) { return uint64_t(byte) * (i * 2654435761ull + 1); }
inline uint64_t toy_checksum(const uint8_t* p, uint64_t n) {
  uint64_t s = 0;
  for (uint64_t i = 0; i < n; ++i) s += toy_term(p[i], i);
  return s;
}

// The example router's score for expert e of layer l at token t: a few popular experts per layer.
GPUNVME_HD inline uint64_t toy_score(uint32_t t, uint32_t l, uint32_t e, uint32_t n_experts) {
  const uint64_t popular = (e * 7 + l) % n_experts < n_experts / 4 ? 3 : 0;
  return (gpunvme::host::splitmix64(t * 1000003ull + l * 1009 + e) & 0xFFFF) * (1 + popular);
}


// "auto" (the GPU when one is present), "gpu" or "cpu"; anything else is a usage error.
inline bool use_gpu_path(const std::string& path) {
  if (path == "cpu") return false;
  if (path != "gpu" && path != "auto") throw gpunvme::cli::UsageError("--path must be auto, gpu or cpu, not '" + path + "'");
  std::string why;
  const bool have = gpunvme::host::cuda_device_available(&why);
  if (path == "gpu" && !have) throw std::runtime_error("--path gpu: " + why);
  return have;
}


// `n` zero bytes in host memory for `what`; says what and how much when the machine has less memory
// than that (checked first: a sanitizer build aborts on a failed allocation) or the allocation fails.
inline std::vector<uint8_t> host_bytes(const std::string& what, uint64_t n) {
  const uint64_t ram = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
  const auto refuse = [&](const std::string& why) {
    return std::runtime_error("cannot allocate " + gpunvme::text::human_bytes(double(n)) + " (" + std::to_string(n) +
                              " bytes) of host memory for " + what + ": " + why);
  };
  if (n > ram) throw refuse("the machine has " + gpunvme::text::human_bytes(double(ram)));
  try {
    return std::vector<uint8_t>(n);
  } catch (const std::bad_alloc&) {
    throw refuse("out of memory");
  }
}

struct GenTensor {
  std::string name;
  std::vector<uint64_t> ne;  // F32
};

// GGUF v3 (runtime/gguf/gguf_builder.h), F32 tensors, alignment 32, data = the position pattern
// (host/io_patterns.h).
inline std::vector<uint8_t> make_gguf(const std::string& arch, uint32_t expert_count, const std::vector<GenTensor>& ts) {
  namespace gb = gpunvme::gguf::builder;
  gb::Spec s;
  s.kvs = {gb::kv_str("general.architecture", arch), gb::kv_str("general.name", "generated-" + arch)};
  if (expert_count) s.kvs.push_back(gb::kv_u32(arch + ".expert_count", expert_count));
  for (const auto& t : ts) {
    uint64_t bytes = 4;
    for (uint64_t d : t.ne) bytes *= d;
    s.tensors.emplace_back(t.name, t.ne, 0 /* F32 */, bytes);
  }
  s.data = false;  // header and padding only: the data is allocated here, after the size check
  const gb::Built header = gb::build(s);
  std::vector<uint8_t> out =
      host_bytes("the generated model (fewer --layers or smaller tensors need less)", header.data_end);
  std::copy(header.bytes.begin(), header.bytes.end(), out.begin());
  gpunvme::host::fill_position_pattern(out.data() + header.data_offset, header.data_end - header.data_offset,
                                       header.data_offset, 1);
  return out;
}

// A dense model of `layers` blocks with tensors of uneven sizes (~`mb_per_layer` MB per layer).
inline std::vector<uint8_t> dense_model(uint32_t layers, double mb_per_layer) {
  if (!(mb_per_layer * 1e6 < 1e15)) throw std::runtime_error("--mb-per-layer must be below 10^9 MB");
  const uint64_t row = std::max<uint64_t>(64, uint64_t(mb_per_layer * 1e6 / 4 / 20));
  std::vector<GenTensor> ts = {{"token_embd.weight", {row, 4}}};
  for (uint32_t l = 0; l < layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    ts.push_back({p + "attn_norm.weight", {row / 8 + 3}});
    ts.push_back({p + "attn_q.weight", {row, 4}});
    ts.push_back({p + "attn_k.weight", {row, 1}});
    ts.push_back({p + "attn_v.weight", {row, 1}});
    ts.push_back({p + "attn_output.weight", {row, 4}});
    ts.push_back({p + "ffn_gate.weight", {row + 7, 3}});
    ts.push_back({p + "ffn_up.weight", {row + 7, 3}});
    ts.push_back({p + "ffn_down.weight", {row + 7, 3}});
  }
  ts.push_back({"output.weight", {row, 4}});
  return make_gguf("llama", 0, ts);
}

// A qwen3moe-like model: stacked gate/up/down experts per layer.
inline std::vector<uint8_t> moe_model(uint32_t layers, uint32_t experts, uint64_t ne0) {
  std::vector<GenTensor> ts = {{"token_embd.weight", {ne0, 4}}};
  for (uint32_t l = 0; l < layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    ts.push_back({p + "attn_q.weight", {ne0, 4}});
    ts.push_back({p + "ffn_gate_inp.weight", {ne0, experts}});
    ts.push_back({p + "ffn_gate_exps.weight", {ne0, 6, experts}});
    ts.push_back({p + "ffn_up_exps.weight", {ne0, 6, experts}});
    ts.push_back({p + "ffn_down_exps.weight", {ne0 + 5, 3, experts}});
  }
  return make_gguf("qwen3moe", experts, ts);
}

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<uint8_t> out = host_bytes("the model file " + path, uint64_t(f.tellg()));
  f.seekg(0);
  if (!f.read(reinterpret_cast<char*>(out.data()), std::streamsize(out.size())))
    throw std::runtime_error("cannot read " + path);
  return out;
}

struct OnDevice {
  gpunvme::model::DetectedModel detected;
  std::unique_ptr<gpunvme::gguf::GgufFile> file;
  std::unique_ptr<gpunvme::model::LbaMap> map;
};

// What the examples write, for the write guard's refusal.
inline constexpr const char* kWhatWeWrite = "the example writes its model from 1 MiB on (--deployed reads one already there)";

// Writes `bytes` at the 1 MiB default unless `already_there` (after the write guard's signature check),
// then finds the model from the device.
inline OnDevice put_and_find(gpunvme::host::Controller& c, gpunvme::host::QueuePair& qp, const std::vector<uint8_t>& bytes,
                             bool already_there, const gpunvme::guard::WritePermission& permission) {
  gpunvme::host::CpuIo io(c, qp, 1);
  gpunvme::model::BlockIo b = gpunvme::model::cpu_block_io(c, io, c.transport().name());
  if (!already_there) {
    const uint64_t start = (1u << 20) / io.lba_bytes();
    const uint64_t blocks = (bytes.size() + io.lba_bytes() - 1) / io.lba_bytes();
    if (start + blocks > io.blocks())
      throw std::runtime_error("the model (" + std::to_string(bytes.size() >> 20) + " MiB) does not fit the " +
                               std::to_string((io.blocks() * io.lba_bytes()) >> 20) +
                               " MiB namespace at 1 MiB; use a larger size= in --device");
    gpunvme::guard::check_no_signatures(b, start, permission);
    std::vector<uint8_t> padded = host_bytes("the model padded to whole blocks", blocks * io.lba_bytes());
    std::copy(bytes.begin(), bytes.end(), padded.begin());
    b.write(start, uint32_t(blocks), padded.data());
  }
  OnDevice d;
  d.detected = gpunvme::model::detect_model(b);
  d.file = std::make_unique<gpunvme::gguf::GgufFile>(gpunvme::model::read_model_header(b, d.detected));
  d.map = std::make_unique<gpunvme::model::LbaMap>(*d.file, io.lba_bytes(), d.detected.start_lba);
  return d;
}

}  // namespace example
