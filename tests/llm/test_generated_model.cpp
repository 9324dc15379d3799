// The generator's model (examples/llm/tools): any byte range reads the same in any order and split,
// serial or threaded; the header is a valid GGUF whose tensors are the layout's; every k-quant block's
// scales are finite halves and the values of a matrix are centred with the spread asked for; the real
// shapes have the real models' sizes and, for qwen3moe, llama.cpp's layout as the engine reads it.
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "examples/llm/quant/dequant.h"
#include "examples/llm/model/config.h"
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
  // 30.5 B and 235.1 B weights at Q4_K's 4.5 bits (the F32 routers and norms aside).
  CHECK(size("qwen3-30b-a3b", gguf::GgmlType::Q4_K) / 1e9 > 17.1);
  CHECK(size("qwen3-30b-a3b", gguf::GgmlType::Q4_K) / 1e9 < 17.3);
  CHECK(size("qwen3-235b-a22b", gguf::GgmlType::Q4_K) / 1e9 > 132);
  CHECK(size("qwen3-235b-a22b", gguf::GgmlType::Q4_K) / 1e9 < 133);
  CHECK(size("qwen3-30b-a3b-llama", gguf::GgmlType::Q4_K) / 1e9 > 16.5);
  CHECK(size("qwen3-30b-a3b-llama", gguf::GgmlType::Q4_K) / 1e9 < 17.5);
  CHECK_THROWS_AS(shape_named("llama4"), std::invalid_argument);
}

TEST_CASE("the qwen3moe shapes are llama.cpp's qwen3moe layout, as the engine reads it") {
  struct Want {
    const char* shape;
    uint32_t layers, embd, heads, kv_heads, head, experts, used, expert_ffn, dense_ffn;
  };
  for (const Want& w : {Want{"qwen3-235b-a22b", 94, 4096, 64, 4, 128, 128, 8, 1536, 12288},
                        Want{"qwen3-30b-a3b", 48, 2048, 32, 4, 128, 128, 8, 768, 6144},
                        Want{"tiny-qwen3moe", 2, 256, 4, 2, 128, 8, 2, 256, 1024}}) {
    INFO(w.shape);
    const ModelLayout layout = model_layout(shape_named(w.shape), uint32_t(gguf::GgmlType::Q4_K), w.shape);
    GeneratedModel model(layout, 1, 1);
    const gguf::GgufFile f = gguf::GgufFile::read(model);  // the header only
    CHECK(f.architecture() == "qwen3moe");
    const llm::ModelConfig c = llm::read_config(f);
    CHECK(c.arch == llm::Arch::kQwen3Moe);
    CHECK(c.n_layer == w.layers);
    CHECK(c.n_embd == w.embd);
    CHECK(c.n_head == w.heads);
    CHECK(c.n_head_kv == w.kv_heads);
    CHECK(c.head_dim == w.head);
    CHECK(c.n_expert == w.experts);
    CHECK(c.n_expert_used == w.used);
    CHECK(c.n_ff == w.expert_ffn);  // expert_feed_forward_length, not the dense feed_forward_length
    CHECK(f.metadata().contains("qwen3moe.feed_forward_length"));
    CHECK(c.n_vocab == (w.embd == 256 ? 512u : 151936u));
    // llama.cpp's qwen3moe tensors (llama-model.cpp, QWEN3MOE): Q and the output over heads x head size,
    // per-head norms of one head's size, the router and three expert stacks; no dense FFN.
    const uint64_t q = uint64_t(w.heads) * w.head, kv = uint64_t(w.kv_heads) * w.head;
    auto ne = [&](const std::string& name) {
      const gguf::TensorInfo* t = f.find_tensor(name);
      return t ? std::vector<uint64_t>(t->ne.begin(), t->ne.begin() + t->n_dims) : std::vector<uint64_t>{};
    };
    const std::string last = "blk." + std::to_string(w.layers - 1) + ".";
    CHECK(ne(last + "attn_q.weight") == std::vector<uint64_t>{w.embd, q});
    CHECK(ne(last + "attn_k.weight") == std::vector<uint64_t>{w.embd, kv});
    CHECK(ne(last + "attn_v.weight") == std::vector<uint64_t>{w.embd, kv});
    CHECK(ne(last + "attn_output.weight") == std::vector<uint64_t>{q, w.embd});
    CHECK(ne(last + "attn_q_norm.weight") == std::vector<uint64_t>{w.head});
    CHECK(ne(last + "attn_k_norm.weight") == std::vector<uint64_t>{w.head});
    CHECK(ne(last + "ffn_gate_inp.weight") == std::vector<uint64_t>{w.embd, w.experts});
    CHECK(ne(last + "ffn_gate_exps.weight") == std::vector<uint64_t>{w.embd, w.expert_ffn, w.experts});
    CHECK(ne(last + "ffn_up_exps.weight") == std::vector<uint64_t>{w.embd, w.expert_ffn, w.experts});
    CHECK(ne(last + "ffn_down_exps.weight") == std::vector<uint64_t>{w.expert_ffn, w.embd, w.experts});
    CHECK(f.find_tensor(last + "ffn_gate.weight") == nullptr);
    CHECK(f.tensors().size() == 3 + 12 * size_t(w.layers));
  }
}
