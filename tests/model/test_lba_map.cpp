// Tensor -> LBA extents, layer grouping and MoE expert slices on generated GGUF files.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/lba_map.h"
#include "runtime/model/model_error.h"
#include "tests/gguf/gguf_builder.h"

using namespace gpunvme;
using namespace gpunvme::model;
using namespace gguf_test;
using Catch::Matchers::ContainsSubstring;

namespace {

// Brute-force check: the extent's blocks cover exactly the byte range and no block more.
void check_extent(const Extent& e, uint64_t file_offset, uint64_t len, uint32_t bs, uint64_t start) {
  uint64_t dev_byte = start * bs + file_offset;
  CHECK(e.first_lba == dev_byte / bs);
  CHECK(e.byte_in_first == dev_byte % bs);
  CHECK(e.byte_length == len);
  if (len == 0) {
    CHECK(e.lba_count == 0);
    return;
  }
  CHECK(e.first_lba * bs <= dev_byte);
  CHECK(e.end_lba() * bs >= dev_byte + len);
  CHECK((e.end_lba() - 1) * bs < dev_byte + len);  // the last block holds a byte of the range
}

Built model_file(bool with_count = true, uint64_t declared = 8) {
  Spec s;
  s.kvs = {kv_str("general.architecture", "qwen3moe"), kv_str("general.name", "moe-test")};
  if (with_count) s.kvs.push_back(kv_u32("qwen3moe.expert_count", static_cast<uint32_t>(declared)));
  s.tensors = {
      {"token_embd.weight", {64, 10}, 8, 2 * 34 * 10},
      {"blk.0.attn_q.weight", {256, 4}, 12, 144 * 4},
      {"blk.0.ffn_gate_exps.weight", {256, 3, 8}, 12, 144 * 3 * 8},
      {"blk.0.ffn_up_exps.weight", {256, 3, 8}, 14, 210 * 3 * 8},
      {"blk.0.ffn_down_exps.weight", {512, 1, 8}, 10, 2 * 84 * 8},
      {"blk.0.ffn_gate_inp.weight", {64, 8}, 0, 4 * 64 * 8},
      {"blk.10.attn_norm.weight", {7}, 0, 28},
      {"blk.2.ffn_gate.0.weight", {32, 2}, 2, 36},
      {"blk.2.ffn_gate.1.weight", {32, 2}, 2, 36},
      {"blk.2.ffn_down.1.weight", {32, 2}, 2, 36},
      {"blk.2.ffn_up.0.weight", {32, 2}, 2, 36},
      {"output_norm.weight", {64}, 0, 256},
      {"output.weight", {64, 10}, 1, 2 * 640},
  };
  return build(s);
}

}  // namespace

TEST_CASE("byte ranges to block extents", "[lba]") {
  CHECK(byte_range_to_extent(0, 512, 512, 0) == Extent{0, 1, 0, 512});
  CHECK(byte_range_to_extent(0, 513, 512, 0) == Extent{0, 2, 0, 513});
  CHECK(byte_range_to_extent(511, 2, 512, 0) == Extent{0, 2, 511, 2});
  CHECK(byte_range_to_extent(4096, 4096, 4096, 256) == Extent{257, 1, 0, 4096});
  CHECK(byte_range_to_extent(100, 0, 512, 5) == Extent{5, 0, 100, 0});
  CHECK(byte_range_to_extent(1000, 10000, 4096, 0) == Extent{0, 3, 1000, 10000});
}

TEST_CASE("every tensor's extent at 512 and 4096 byte blocks, start LBA 0 and later", "[lba]") {
  auto b = model_file();
  auto f = gguf::GgufFile::parse(b.bytes);
  uint32_t bs = GENERATE(512u, 4096u);
  uint64_t start = GENERATE(0ull, 1ull, 2048ull, 123457ull);
  LbaMap map(f, bs, start);
  INFO("lba " << bs << " start " << start);
  REQUIRE(map.tensors().size() == f.tensors().size());
  bool saw_unaligned = false;
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& t = f.tensors()[i];
    INFO(t.name);
    check_extent(map.tensors()[i].extent, t.file_offset, t.size_bytes, bs, start);
    saw_unaligned |= map.tensors()[i].extent.byte_in_first != 0;
  }
  CHECK(saw_unaligned);  // alignment 32 puts most tensors mid-block
  check_extent(map.model_extent(), 0, f.data_end(), bs, start);
  CHECK(map.find("output.weight")->tensor->name == "output.weight");
  CHECK(map.find("nope") == nullptr);
}

TEST_CASE("layers group blk.N tensors; the rest are globals", "[lba]") {
  auto b = model_file();
  auto f = gguf::GgufFile::parse(b.bytes);
  LbaMap map(f, 512, 2048);
  REQUIRE(map.layers().size() == 3);
  CHECK(map.layers()[0].layer == 0);
  CHECK(map.layers()[1].layer == 2);
  CHECK(map.layers()[2].layer == 10);  // numeric, not lexicographic, order
  CHECK(map.layers()[0].tensors.size() == 5);
  CHECK(map.layers()[1].tensors.size() == 4);
  REQUIRE(map.globals().size() == 3);
  CHECK(f.tensors()[map.globals()[0]].name == "token_embd.weight");
  CHECK(f.tensors()[map.globals()[2]].name == "output.weight");
  // Layer 0's span: from its first tensor's first byte to its last tensor's last byte.
  const auto* l0 = map.layer(0);
  REQUIRE(l0 != nullptr);
  uint64_t lo = f.find_tensor("blk.0.attn_q.weight")->file_offset;
  uint64_t hi = f.find_tensor("blk.0.ffn_gate_inp.weight")->file_end();
  check_extent(l0->extent, lo, hi - lo, 512, 2048);
  for (size_t i : l0->tensors) {
    CHECK(map.tensors()[i].extent.first_lba >= l0->extent.first_lba);
    CHECK(map.tensors()[i].extent.end_lba() <= l0->extent.end_lba());
  }
  CHECK(map.layer(1) == nullptr);
}

TEST_CASE("MoE experts: stacked slices and per-expert tensors", "[lba]") {
  auto b = model_file();
  auto f = gguf::GgufFile::parse(b.bytes);
  uint32_t bs = GENERATE(512u, 4096u);
  LbaMap map(f, bs, 256);
  // 3 stacked tensors x 8 experts in layer 0, 4 per-expert tensors in layer 2.
  REQUIRE(map.experts().size() == 3 * 8 + 4);
  const auto* gate = f.find_tensor("blk.0.ffn_gate_exps.weight");
  uint64_t slice = gate->size_bytes / 8;
  CHECK(slice == 144 * 3);
  for (uint32_t k = 0; k < 8; ++k) {
    const auto* e = map.expert(0, k, Projection::kGate);
    REQUIRE(e != nullptr);
    CHECK(e->stacked);
    CHECK(e->file_offset == gate->file_offset + k * slice);
    check_extent(e->extent, gate->file_offset + k * slice, slice, bs, 256);
  }
  const auto* down7 = map.expert(0, 7, Projection::kDown);
  REQUIRE(down7 != nullptr);
  const auto* down = f.find_tensor("blk.0.ffn_down_exps.weight");
  CHECK(down7->file_offset + down7->extent.byte_length == down->file_end());  // last slice ends the tensor
  const auto* old = map.expert(2, 1, Projection::kDown);
  REQUIRE(old != nullptr);
  CHECK_FALSE(old->stacked);
  CHECK(old->extent == map.find("blk.2.ffn_down.1.weight")->extent);
  CHECK(map.expert(2, 1, Projection::kUp) == nullptr);
  CHECK(map.expert(0, 8, Projection::kGate) == nullptr);
  // ffn_gate_inp (the router) is not an expert.
  for (const auto& e : map.experts()) CHECK(f.tensors()[e.tensor].name != "blk.0.ffn_gate_inp.weight");
  // Sorted by (layer, expert, projection).
  CHECK(map.experts()[0].proj == Projection::kGate);
  CHECK(map.experts()[1].proj == Projection::kUp);
  CHECK(map.experts()[2].proj == Projection::kDown);
}

TEST_CASE("LBA map errors", "[lba]") {
  auto b = model_file(true, 4);
  auto f = gguf::GgufFile::parse(b.bytes);
  CHECK_THROWS_WITH(LbaMap(f, 512, 0), ContainsSubstring("qwen3moe.expert_count is 4"));
  auto ok = gguf::GgufFile::parse(model_file(false).bytes);
  CHECK_THROWS_WITH(LbaMap(ok, 1000, 0), ContainsSubstring("not a power of two >= 512"));
  CHECK_THROWS_WITH(LbaMap(ok, 256, 0), ContainsSubstring("not a power of two >= 512"));
  Spec s;
  s.tensors = {{"blk.0.ffn_up_exps.weight", {32, 8}, 0, 32 * 8 * 4}};
  auto two_d = gguf::GgufFile::parse(build(s).bytes);
  CHECK_THROWS_WITH(LbaMap(two_d, 512, 0), ContainsSubstring("has 2 dimensions, expected 3"));
  // Found by the fuzzer: ne[2] = 2^40 experts of zero bytes each must not build 2^40 extents.
  s.tensors = {{"blk.0.ffn_up_exps.weight", {32, 0, 1ull << 40}, 0, 0}};
  auto empty = gguf::GgufFile::parse(build(s).bytes);
  CHECK_THROWS_WITH(LbaMap(empty, 512, 0), ContainsSubstring("holds no data"));
}

TEST_CASE("tensor name conventions", "[lba]") {
  CHECK(layer_of("blk.12.attn_q.weight") == 12u);
  CHECK_FALSE(layer_of("blk.x.attn_q.weight"));
  CHECK_FALSE(layer_of("blk.12"));
  CHECK_FALSE(layer_of("token_embd.weight"));
  auto e = parse_expert_name("blk.3.ffn_gate_up_exps.weight");
  REQUIRE(e);
  CHECK(e->proj == Projection::kGateUp);
  CHECK(e->stacked);
  e = parse_expert_name("blk.3.ffn_down.17.weight");
  REQUIRE(e);
  CHECK(e->expert == 17);
  CHECK_FALSE(e->stacked);
  CHECK_FALSE(parse_expert_name("blk.3.ffn_down.weight"));
  CHECK_FALSE(parse_expert_name("blk.3.ffn_down_shexp.weight"));
  CHECK_FALSE(parse_expert_name("blk.3.ffn_gate_inp.weight"));
  CHECK_FALSE(parse_expert_name("blk.3.ffn_up_exps.bias"));
}
