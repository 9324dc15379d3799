// model::default_stripe_unit (runtime/model/stripe.h): a quarter of the smallest routed-expert slice,
// rounded down to a power of two, within [128 KiB, 1 MiB]; 1 MiB without experts. On headers built
// with the real models' slice shapes (two experts each, so the files stay a few MB); the generated
// full-size shapes are checked in tests/llm/test_emu_gen.cpp.
#include <catch2/catch_test_macros.hpp>
#include <string>
#include <vector>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/stripe.h"
#include "tests/gguf/gguf_builder.h"

using namespace gpunvme;
using namespace gguf_test;

namespace {

constexpr uint32_t kF32 = 0, kQ4K = 12;
constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;

// Q4_K: 144 bytes per 256 elements.
uint64_t q4k_bytes(uint64_t cols, uint64_t rows, uint64_t n) { return cols / 256 * 144 * rows * n; }

// A llama-layout file: one attention matrix, then `experts` (none: a dense model).
uint64_t unit_of(const std::vector<Tensor>& experts, std::vector<std::function<void(Bytes&)>> kvs = {}) {
  Spec s;
  s.kvs = {kv_str("general.architecture", "llama"), kv_str("general.name", "unit test")};
  s.kvs.insert(s.kvs.end(), kvs.begin(), kvs.end());
  s.tensors = {{"blk.0.attn_q.weight", {256, 256}, kQ4K, q4k_bytes(256, 256, 1)}};
  s.tensors.insert(s.tensors.end(), experts.begin(), experts.end());
  const Built b = build(s);
  return model::default_stripe_unit(gguf::GgufFile::parse(b.bytes));
}

}  // namespace

TEST_CASE("stripe unit: a quarter of the smallest expert slice, as a power of two in [128 KiB, 1 MiB]", "[stripe]") {
  // Qwen3-30B-A3B: 768 x 2048 Q4_K, 884736 bytes a slice: a quarter is 216 KiB, so 128 KiB.
  CHECK(unit_of({{"blk.0.ffn_gate_exps.weight", {2048, 768, 2}, kQ4K, q4k_bytes(2048, 768, 2)}}) == 128 * KiB);
  // Qwen3-235B-A22B: 1536 x 4096 Q4_K, 3538944 bytes: a quarter is 864 KiB, so 512 KiB.
  CHECK(unit_of({{"blk.0.ffn_down_exps.weight", {1536, 4096, 2}, kQ4K, q4k_bytes(1536, 4096, 2)}}) == 512 * KiB);
  // The power-of-two boundary: slices of exactly 4 MiB give 1 MiB; 4 KiB less, 512 KiB.
  CHECK(unit_of({{"blk.0.ffn_up_exps.weight", {1024, 1024, 2}, kF32, 4 * MiB * 2}}) == 1 * MiB);
  CHECK(unit_of({{"blk.0.ffn_up_exps.weight", {1024, 1023, 2}, kF32, (4 * MiB - 4 * KiB) * 2}}) == 512 * KiB);
  // Larger slices stay at 1 MiB (Mixtral's are 33 MB); tiny ones at 128 KiB.
  CHECK(unit_of({{"blk.0.ffn_up_exps.weight", {1024, 2048, 2}, kF32, 8 * MiB * 2}}) == 1 * MiB);
  CHECK(unit_of({{"blk.0.ffn_up_exps.weight", {64, 9, 4}, kF32, 4 * 64 * 9 * 4}}) == 128 * KiB);
}

TEST_CASE("stripe unit: the smallest slice of any projection or layer decides", "[stripe]") {
  // Layer 0's gate slices are 3.5 MB (512 KiB alone), layer 1's down slices 0.88 MB: 128 KiB.
  CHECK(unit_of({{"blk.0.ffn_gate_exps.weight", {1536, 4096, 2}, kQ4K, q4k_bytes(1536, 4096, 2)},
                 {"blk.1.ffn_down_exps.weight", {2048, 768, 2}, kQ4K, q4k_bytes(2048, 768, 2)}}) == 128 * KiB);
  // Per-expert tensors (older Mixtral files: blk.N.ffn_gate.E.weight) are slices too.
  CHECK(unit_of({{"blk.0.ffn_gate.0.weight", {1536, 4096}, kQ4K, q4k_bytes(1536, 4096, 1)},
                 {"blk.0.ffn_gate.1.weight", {1536, 4096}, kQ4K, q4k_bytes(1536, 4096, 1)}}) == 512 * KiB);
}

TEST_CASE("stripe unit: 1 MiB without routed experts, or with experts LbaMap cannot cut", "[stripe]") {
  CHECK(unit_of({}) == 1 * MiB);
  // A shared expert (ffn_*_shexp) is read with its layer, not fetched per token: no routed slice.
  CHECK(unit_of({{"blk.0.ffn_up_shexp.weight", {2048, 768}, kQ4K, q4k_bytes(2048, 768, 1)}}) == 1 * MiB);
  // expert_count disagreeing with the stack (the engine refuses the file): not an error here.
  CHECK(unit_of({{"blk.0.ffn_gate_exps.weight", {2048, 768, 2}, kQ4K, q4k_bytes(2048, 768, 2)}},
                {kv_u32("llama.expert_count", 8)}) == 1 * MiB);
}
