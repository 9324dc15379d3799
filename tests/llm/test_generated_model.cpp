// The generator's model (examples/llm/tools): any byte range reads the same in any order and split,
// serial or threaded; the header is a valid GGUF whose tensors are the layout's; every k-quant block's
// scales are finite halves and the values of a matrix are centred with the spread asked for.
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "examples/llm/quant/dequant.h"
#include "examples/llm/tools/generated_model.h"
#include "runtime/gguf/gguf_file.h"

using namespace gpunvme;
using namespace gpunvme::llm::gen;

namespace {

std::vector<uint8_t> read_all(GeneratedModel& m) {
  std::vector<uint8_t> b(m.size());
  REQUIRE(m.read(0, b.data(), b.size()) == b.size());
  return b;
}

}  // namespace

TEST_CASE("any byte range of a generated model reads the same, whatever the order, split or threads") {
  const ModelLayout layout = model_layout(shape_named("tiny-moe"), uint32_t(gguf::GgmlType::Q4_K), "t");
  GeneratedModel threaded(layout, 7, 4), serial(layout, 7, 1);
  const std::vector<uint8_t> whole = read_all(threaded);
  CHECK(read_all(serial) == whole);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 300; ++i) {
    const uint64_t off = rng() % whole.size(), len = 1 + rng() % std::min<uint64_t>(whole.size() - off, 3 << 20);
    std::vector<uint8_t> part(len);
    REQUIRE(serial.read(off, part.data(), len) == len);
    REQUIRE(std::memcmp(part.data(), whole.data() + off, len) == 0);
  }
  std::vector<uint8_t> tail(100);
  CHECK(serial.read(whole.size() - 10, tail.data(), 100) == 10);  // short only at the end
  CHECK(serial.read(whole.size(), tail.data(), 100) == 0);
  GeneratedModel other_seed(layout, 8, 1);
  CHECK(read_all(other_seed) != whole);
}

TEST_CASE("the header is a valid GGUF with the layout's tensors; blocks are valid and centred") {
  for (const uint32_t type : {uint32_t(gguf::GgmlType::Q4_K), uint32_t(gguf::GgmlType::Q6_K)}) {
    const ModelLayout layout = model_layout(shape_named("tiny"), type, "t");
    GeneratedModel m(layout, 1, 2);
    const std::vector<uint8_t> bytes = read_all(m);
    const gguf::GgufFile f = gguf::GgufFile::parse(bytes);
    REQUIRE(f.tensors().size() == layout.tensors.size());
    CHECK(f.data_end() == bytes.size());
    for (const TensorPlan& t : layout.tensors) {
      const gguf::TensorInfo* info = f.find_tensor(t.name);
      REQUIRE(info != nullptr);
      CHECK(info->type_id == t.type);
      if (t.type == uint32_t(gguf::GgmlType::F32)) continue;
      // Dequantize the whole matrix with the engine's own code: finite, centred, spread ~ 1/sqrt(cols).
      const uint8_t* p = bytes.data() + f.data_offset() + info->offset;
      const uint64_t cols = t.ne[0], rows = t.bytes / (cols / 256 * (type == uint32_t(gguf::GgmlType::Q4_K) ? 144 : 210));
      std::vector<float> row(cols);
      double sum = 0, sq = 0;
      uint64_t not_finite = 0;
      for (uint64_t r = 0; r < rows; ++r) {
        for (uint64_t blk = 0; blk < cols / 256; ++blk) llm::dequant_block(gguf::GgmlType(type), p + r * (t.bytes / rows), blk, row.data() + 256 * blk);
        for (float v : row) {
          not_finite += !std::isfinite(v);
          sum += v;
          sq += double(v) * v;
        }
      }
      const double n = double(rows * cols), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
      const double want = t.fill == Fill::kEmbedding ? 1.0 : 1.0 / std::sqrt(double(cols));
      INFO(t.name << " mean " << mean << " sd " << sd << " want " << want);
      CHECK(not_finite == 0);
      CHECK(sd > 0.5 * want);
      CHECK(sd < 2 * want);
      CHECK(std::abs(mean) < 0.1 * sd);
    }
  }
}

TEST_CASE("the full-size shapes have the sizes the benchmark needs") {
  auto size = [](const char* s, gguf::GgmlType t) { return GeneratedModel(model_layout(shape_named(s), uint32_t(t), s), 1).size(); };
  CHECK(size("llama3-70b", gguf::GgmlType::Q6_K) / 1e9 > 57.5);  // Llama-3-70B Q6_K: about 57.9 GB
  CHECK(size("llama3-70b", gguf::GgmlType::Q6_K) / 1e9 < 58.5);
  CHECK(size("mixtral-8x7b", gguf::GgmlType::Q4_K) / 1e9 > 26);
  CHECK(size("mixtral-8x7b", gguf::GgmlType::Q4_K) / 1e9 < 27);
  CHECK(size("qwen3-30b-a3b", gguf::GgmlType::Q4_K) / 1e9 > 16.5);
  CHECK(size("qwen3-30b-a3b", gguf::GgmlType::Q4_K) / 1e9 < 17.5);
  CHECK_THROWS_AS(shape_named("llama4"), std::invalid_argument);
}
