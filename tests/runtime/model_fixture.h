// Generated GGUF models written onto an emulated namespace, and the byte checks the runtime tests
// share. Tensor data is a position-dependent pseudo-random pattern (no period), so a slice read
// from the wrong LBA or placed at the wrong offset never compares equal by accident.
//
// ModelOnDevice is the usual starting point: an emulated controller, a generated model written at
// the 1 MiB default, its GGUF and LbaMap, and checks of what a plan / a fetch put in memory:
//   rt_test::ModelOnDevice m("emu:ram,size=32M,lba=512", rt_test::dense_model(6));
//   stream::CpuSubmitter sub(*m.ctrl, *m.qp);   // or a GPU submitter on queues of its own (qid 2+)
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "host/controller.h"
#include "host/cpu_io.h"
#include "host/io_patterns.h"
#include "host/open_device.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/lba_map.h"
#include "runtime/plan/command_plan.h"
#include "runtime/stream/expert_fetcher.h"
#include "tests/gguf/gguf_builder.h"
#include "tests/test_files.h"

namespace rt_test {

// Byte i of the file gets a value that depends on all of i (host/io_patterns.h's position pattern).
inline void fill_file_pattern(std::vector<uint8_t>& b, uint64_t from, uint64_t seed) {
  gpunvme::host::fill_position_pattern(b.data() + from, b.size() - from, from, seed);
}

// A dense model: n_layers layers of tensors with odd sizes (so tensors start mid-block), plus
// token_embd and output. F32 tensors, GGUF alignment 32.
inline std::vector<uint8_t> dense_model(uint32_t n_layers, uint64_t row = 1000, uint64_t seed = 1) {
  using namespace gguf_test;
  Spec s;
  s.kvs = {kv_str("general.architecture", "llama"), kv_str("general.name", "rt-dense")};
  s.tensors.push_back({"token_embd.weight", {row, 3}, 0, 4 * row * 3});
  for (uint32_t l = 0; l < n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const uint64_t r = row + 8 * l;  // layers of different sizes
    s.tensors.push_back({p + "attn_norm.weight", {r / 4 + 1}, 0, 4 * (r / 4 + 1)});
    s.tensors.push_back({p + "attn_q.weight", {r, 5}, 0, 4 * r * 5});
    s.tensors.push_back({p + "attn_k.weight", {r, 2}, 0, 4 * r * 2});
    s.tensors.push_back({p + "ffn_down.weight", {r, 7}, 0, 4 * r * 7});
  }
  s.tensors.push_back({"output.weight", {row, 2}, 0, 4 * row * 2});
  Built b = build(s);
  fill_file_pattern(b.bytes, b.data_offset, seed);
  return b.bytes;
}

// A MoE model (qwen3moe): stacked gate/up/down experts per layer plus dense tensors.
inline std::vector<uint8_t> moe_model(uint32_t n_layers, uint32_t n_experts, uint64_t ne0 = 300, uint64_t seed = 2) {
  using namespace gguf_test;
  Spec s;
  s.kvs = {kv_str("general.architecture", "qwen3moe"), kv_str("general.name", "rt-moe"),
           kv_u32("qwen3moe.expert_count", n_experts)};
  s.tensors.push_back({"token_embd.weight", {ne0, 2}, 0, 4 * ne0 * 2});
  for (uint32_t l = 0; l < n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    s.tensors.push_back({p + "attn_q.weight", {ne0, 3}, 0, 4 * ne0 * 3});
    s.tensors.push_back({p + "ffn_gate_inp.weight", {ne0, n_experts}, 0, 4 * ne0 * n_experts});
    s.tensors.push_back({p + "ffn_gate_exps.weight", {ne0, 5, n_experts}, 0, 4 * ne0 * 5 * n_experts});
    s.tensors.push_back({p + "ffn_up_exps.weight", {ne0, 5, n_experts}, 0, 4 * ne0 * 5 * n_experts});
    s.tensors.push_back({p + "ffn_down_exps.weight", {ne0 + 7, 3, n_experts}, 0, 4 * (ne0 + 7) * 3 * n_experts});
  }
  Built b = build(s);
  fill_file_pattern(b.bytes, b.data_offset, seed);
  return b.bytes;
}

// Writes `bytes` onto namespace 1 from `start_lba` on through CPU I/O (zero padded to a block).
inline void write_model(gpunvme::host::Controller& ctrl, gpunvme::host::QueuePair& qp, const std::vector<uint8_t>& bytes,
                        uint64_t start_lba) {
  gpunvme::host::CpuIo io(ctrl, qp, 1);
  const uint64_t lba = io.lba_bytes();
  const uint64_t chunk = 4ull << 20;
  gpunvme::host::DmaBuffer buf(ctrl.transport(), chunk);
  for (uint64_t off = 0; off < bytes.size(); off += chunk) {
    const uint64_t n = std::min<uint64_t>(chunk, bytes.size() - off);
    std::memset(buf.host(), 0, chunk);
    std::memcpy(buf.host(), bytes.data() + off, n);
    io.write(start_lba + off / lba, (n + lba - 1) / lba, buf, 0);
  }
}

// Compares every piece of a plan, read into `dest`, with the file bytes (model at start_lba).
// Returns the number of mismatching pieces (0 = byte-exact).
template <class Plan>
inline size_t mismatched_pieces(const Plan& plan, const uint8_t* dest, const std::vector<uint8_t>& file, uint32_t lba,
                                uint64_t start_lba) {
  size_t bad = 0;
  for (const auto& p : plan.pieces) {
    const uint64_t file_off = p.source.first_lba * lba + p.source.byte_in_first - start_lba * lba;
    if (file_off + p.source.byte_length > file.size() ||
        std::memcmp(dest + p.data_offset, file.data() + file_off, p.source.byte_length) != 0)
      ++bad;
  }
  return bad;
}

// An emulated (or any) controller with one CPU I/O queue pair (qid 1, used to write the model), the
// model file written onto namespace 1 at the 1 MiB default of deploy_record.h, parsed, and mapped.
// Members stay public so a test can add queues, submitters or buffers of its own.
struct ModelOnDevice {
  std::unique_ptr<gpunvme::host::Controller> ctrl;
  std::unique_ptr<gpunvme::host::QueuePair> qp;
  std::vector<uint8_t> file;
  std::unique_ptr<gpunvme::gguf::GgufFile> gguf;
  std::unique_ptr<gpunvme::model::LbaMap> map;
  uint64_t start_lba = 0;
  uint32_t lba = 0;

  ModelOnDevice(const std::string& device, std::vector<uint8_t> bytes, uint32_t queue_entries = 64)
      : ctrl(gpunvme::host::open_controller(device)), file(std::move(bytes)) {
    qp = ctrl->create_io_queue_pair(1, queue_entries);
    lba = ctrl->namespace_info(1).lba_bytes;
    start_lba = (1u << 20) / lba;
    write_model(*ctrl, *qp, file, start_lba);
    gguf = std::make_unique<gpunvme::gguf::GgufFile>(gpunvme::gguf::GgufFile::parse(file));
    map = std::make_unique<gpunvme::model::LbaMap>(*gguf, lba, start_lba);
  }

  // Pieces of `plan`, read into `dest`, that differ from the file (0 = byte-exact).
  size_t bad_pieces(const gpunvme::plan::CommandPlan& plan, const uint8_t* dest) const {
    return mismatched_pieces(plan, dest, file, lba, start_lba);
  }

  // Tensors of `layer`, found through `plan` in `dest`, that differ from the file.
  size_t bad_tensors(uint32_t layer, const gpunvme::plan::CommandPlan& plan, const uint8_t* dest) const {
    size_t bad = 0;
    const auto* L = map->layer(layer);
    for (size_t ti : L->tensors) {
      const auto& t = map->tensors()[ti];
      const auto at = plan.locate(t.extent.first_lba * lba + t.extent.byte_in_first, lba);
      if (!at || std::memcmp(dest + *at, file.data() + t.tensor->file_offset, t.tensor->size_bytes) != 0) ++bad;
    }
    return bad;
  }

  // Fetched experts of `layer` (a fetcher's result() over its scratchpad `sp`) whose parts differ from
  // the file's slices, or that lack / add a part for `which`.
  size_t bad_experts(uint32_t layer, const std::vector<gpunvme::stream::FetchedExpert>& result, const uint8_t* sp,
                     gpunvme::stream::ExpertParts which) const {
    using gpunvme::model::Projection;
    size_t bad = 0;
    for (const auto& r : result) {
      size_t want_parts = 0;
      for (Projection p : {Projection::kGate, Projection::kUp, Projection::kDown}) {
        if (which == gpunvme::stream::ExpertParts::kDownOnly && p != Projection::kDown) continue;
        ++want_parts;
        const gpunvme::model::ExpertExtent* e = map->expert(layer, r.expert, p);
        const gpunvme::stream::FetchedPart* got = nullptr;
        for (const auto& fp : r.parts)
          if (fp.proj == p) got = &fp;
        if (!e || !got || got->bytes != e->extent.byte_length ||
            std::memcmp(sp + got->offset, file.data() + e->file_offset, e->extent.byte_length) != 0)
          ++bad;
      }
      if (r.parts.size() != want_parts) ++bad;
    }
    return bad;
  }
};

using test_files::gemma_path;
using test_files::read_file;

}  // namespace rt_test
