// The generator's model (examples/llm/tools): any byte range reads the same in any order and split,
// serial or threaded; the header is a valid GGUF whose tensors are the layout's; every quantized block
// (Q4_K, Q6_K, Q5_0, Q8_0, MXFP4) dequantizes to finite values and a matrix's are centred with the spread
// asked for, F32 vectors in their ranges; the real shapes have the real models' sizes and, for qwen3moe,
// gpt-oss and gemma3, llama.cpp's layout as the engine reads it; shapes and types that do not go together
// are refused.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "examples/llm/quant/dequant.h"
#include "examples/llm/model/config.h"
#include "examples/llm/model/weights.h"
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

// The header of a generated model (no tensor bytes generated) and the engine's configuration from it.
struct Header {
  gguf::GgufFile file;
  llm::ModelConfig config;
};
Header header_of(const char* shape, gguf::GgmlType type) {
  GeneratedModel model(model_layout(shape_named(shape), uint32_t(type), shape), 1, 1);
  gguf::GgufFile f = gguf::GgufFile::read(model);
  const llm::ModelConfig c = llm::read_config(f);
  return {std::move(f), c};
}

// The architecture and attention dimensions a shape's header gives, as the engine's configuration reads them.
struct Dims {
  const char* arch_key;
  llm::Arch arch;
  uint32_t layers, embd, heads, kv_heads, head;
};
void check_dims(const gguf::GgufFile& f, const llm::ModelConfig& c, const Dims& d) {
  CHECK(f.architecture() == d.arch_key);
  CHECK(c.arch == d.arch);
  CHECK(c.n_layer == d.layers);
  CHECK(c.n_embd == d.embd);
  CHECK(c.n_head == d.heads);
  CHECK(c.n_head_kv == d.kv_heads);
  CHECK(c.head_dim == d.head);
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
  struct Case {
    const char* shape;
    gguf::GgmlType type;
  };
  for (const Case& c : {Case{"tiny", gguf::GgmlType::Q4_K}, Case{"tiny", gguf::GgmlType::Q6_K},
                        Case{"tiny-gpt-oss", gguf::GgmlType::MXFP4}, Case{"tiny-qwen3moe", gguf::GgmlType::MXFP4},
                        Case{"tiny", gguf::GgmlType::Q8_0}, Case{"tiny-gemma3", gguf::GgmlType::Q4_K}}) {
    const ModelLayout layout = model_layout(shape_named(c.shape), uint32_t(c.type), "t");
    GeneratedModel m(layout, 1, 2);
    const std::vector<uint8_t> bytes = read_all(m);
    const gguf::GgufFile f = gguf::GgufFile::parse(bytes);
    REQUIRE(f.tensors().size() == layout.tensors.size());
    CHECK(f.data_end() == bytes.size());
    for (const TensorPlan& t : layout.tensors) {
      INFO(c.shape << " " << t.name);
      const gguf::TensorInfo* info = f.find_tensor(t.name);
      REQUIRE(info != nullptr);
      CHECK(info->type_id == t.type);
      const uint8_t* p = bytes.data() + f.data_offset() + info->offset;
      // Norms about 1 (gemma3's post_ffw_norm about 8), biases and sinks small, routers about 1.
      if (t.type == uint32_t(gguf::GgmlType::F32)) {
        const double lo = t.fill == Fill::kNorm ? 0.89 : t.fill == Fill::kPostNorm ? 7.1 : t.fill == Fill::kBias ? -0.18 : -1.71;
        const double hi = t.fill == Fill::kNorm ? 1.11 : t.fill == Fill::kPostNorm ? 8.9 : t.fill == Fill::kBias ? 0.18 : 1.71;
        std::vector<float> v(t.bytes / 4);
        std::memcpy(v.data(), p, t.bytes);
        CHECK(std::all_of(v.begin(), v.end(), [&](float x) { return x >= lo && x <= hi; }));
        CHECK(std::adjacent_find(v.begin(), v.end()) == v.end());  // random, not one value repeated
        continue;
      }
      // Dequantize the whole matrix with the engine's own code: finite, centred, spread ~ 1/sqrt(cols).
      const auto type = gguf::ggml_type_info(t.type);
      REQUIRE(type);
      const uint64_t cols = t.ne[0], row_bytes = cols / type->block_size * type->type_size, rows = t.bytes / row_bytes;
      std::vector<float> row(cols);
      double sum = 0, sq = 0;
      uint64_t not_finite = 0;
      for (uint64_t r = 0; r < rows; ++r) {
        for (uint64_t blk = 0; blk < cols / type->block_size; ++blk)
          llm::dequant_block(gguf::GgmlType(t.type), p + r * row_bytes, blk, row.data() + type->block_size * blk);
        for (float v : row) {
          not_finite += !std::isfinite(v);
          sum += v;
          sq += double(v) * v;
        }
      }
      const double n = double(rows * cols), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
      const double want = t.fill == Fill::kEmbedding ? 1.0 : 1.0 / std::sqrt(double(cols));
      INFO(type->name << " mean " << mean << " sd " << sd << " want " << want);
      CHECK(not_finite == 0);
      CHECK(sd > 0.5 * want);
      CHECK(sd < 2 * want);
      CHECK(std::abs(mean) < 0.1 * sd);
    }
  }
}

TEST_CASE("mxfp4 is MXFP4 experts and Q8_0 elsewhere; shapes and types that do not go together are refused") {
  const ModelLayout layout = model_layout(shape_named("tiny-qwen3moe"), type_named("mxfp4"), "t");
  for (const TensorPlan& t : layout.tensors) {
    INFO(t.name);
    const bool expert = t.name.find("_exps.") != std::string::npos, matrix = t.ne.size() > 1 && t.type != uint32_t(gguf::GgmlType::F32);
    if (expert) CHECK(t.type == uint32_t(gguf::GgmlType::MXFP4));
    if (matrix && !expert) CHECK(t.type == uint32_t(gguf::GgmlType::Q8_0));
  }
  CHECK(model_name(shape_named("gpt-oss-120b"), type_named("MXFP4")) == "gpt-oss-120b-mxfp4");
  CHECK(model_name(shape_named("llama3-8b"), type_named("Q8_0")) == "llama3-8b-q8_0");
  CHECK_THROWS_AS(type_named("q5_k"), std::invalid_argument);
  // q8_0 on MoE shapes: Q8_0 experts too; gpt-oss takes only mxfp4, as it is published.
  for (const TensorPlan& t : model_layout(shape_named("tiny-qwen3moe"), type_named("q8_0"), "t").tensors)
    if (t.ne.size() > 1 && t.fill == Fill::kWeight) CHECK(t.type == uint32_t(gguf::GgmlType::Q8_0));
  CHECK_THROWS_AS(model_layout(shape_named("tiny-gpt-oss"), uint32_t(gguf::GgmlType::Q8_0), "t"), std::invalid_argument);
  // gpt-oss in a k-quant: its rows of 2880 are not whole 256-element blocks; mxfp4 without experts.
  CHECK_THROWS_AS(model_layout(shape_named("gpt-oss-20b"), uint32_t(gguf::GgmlType::Q4_K), "t"), std::invalid_argument);
  CHECK_THROWS_AS(model_layout(shape_named("tiny"), uint32_t(gguf::GgmlType::MXFP4), "t"), std::invalid_argument);
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
  // ggml-org's gpt-oss GGUFs (MXFP4 experts, Q8_0 embedding, attention and output, F32 biases, sinks,
  // norms and routers): llama-bench reports 11.27 GiB and 59.02 GiB (12.10 GB and 63.37 GB).
  CHECK(size("gpt-oss-20b", gguf::GgmlType::MXFP4) / 1e9 > 12.05);
  CHECK(size("gpt-oss-20b", gguf::GgmlType::MXFP4) / 1e9 < 12.15);
  CHECK(size("gpt-oss-120b", gguf::GgmlType::MXFP4) / 1e9 > 63.3);
  CHECK(size("gpt-oss-120b", gguf::GgmlType::MXFP4) / 1e9 < 63.45);
  // Llama 3 8B: 8.03 B weights (1.05 B of them the embedding and output) at 4.5, 6.5625 and 8.5 bits:
  // 4.52, 6.59 and 8.53 GB (llama-bench reports Meta's Q8_0 GGUF as 7.95 GiB, 8.54 GB).
  CHECK(size("llama3-8b", gguf::GgmlType::Q4_K) / 1e9 > 4.51);
  CHECK(size("llama3-8b", gguf::GgmlType::Q4_K) / 1e9 < 4.53);
  CHECK(size("llama3-8b", gguf::GgmlType::Q6_K) / 1e9 > 6.58);
  CHECK(size("llama3-8b", gguf::GgmlType::Q6_K) / 1e9 < 6.60);
  CHECK(size("llama3-8b", gguf::GgmlType::Q8_0) / 1e9 > 8.52);
  CHECK(size("llama3-8b", gguf::GgmlType::Q8_0) / 1e9 < 8.54);
  // Gemma 3 270M: 268 M weights, 168 M of them the (tied) embedding; rows of 640 in Q5_0 for q4_k, Q8_0
  // for q6_k: 180.1, 276.5 and 285.0 MB (the published Q4_K_M, with a Q8_0 embedding: 253.1 MB).
  CHECK(size("gemma3-270m", gguf::GgmlType::Q4_K) / 1e6 > 180.0);
  CHECK(size("gemma3-270m", gguf::GgmlType::Q4_K) / 1e6 < 180.2);
  CHECK(size("gemma3-270m", gguf::GgmlType::Q6_K) / 1e6 > 276.4);
  CHECK(size("gemma3-270m", gguf::GgmlType::Q6_K) / 1e6 < 276.6);
  CHECK(size("gemma3-270m", gguf::GgmlType::Q8_0) / 1e6 > 284.9);
  CHECK(size("gemma3-270m", gguf::GgmlType::Q8_0) / 1e6 < 285.1);
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
    const auto [f, c] = header_of(w.shape, gguf::GgmlType::Q4_K);
    check_dims(f, c, {"qwen3moe", llm::Arch::kQwen3Moe, w.layers, w.embd, w.heads, w.kv_heads, w.head});
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

TEST_CASE("the gpt-oss shapes are llama.cpp's gpt-oss layout, as the engine reads and maps it") {
  struct Want {
    const char* shape;
    uint32_t layers, embd, experts, ffn, vocab, ctx, window;
  };
  for (const Want& w : {Want{"gpt-oss-120b", 36, 2880, 128, 2880, 201088, 131072, 128},
                        Want{"gpt-oss-20b", 24, 2880, 32, 2880, 201088, 131072, 128},
                        Want{"tiny-gpt-oss", 2, 320, 8, 320, 512, 512, 8}}) {
    INFO(w.shape);
    const auto [f, c] = header_of(w.shape, gguf::GgmlType::MXFP4);
    check_dims(f, c, {"gpt-oss", llm::Arch::kGptOss, w.layers, w.embd, w.embd == 320 ? 8u : 64u, w.embd == 320 ? 2u : 8u, 64});
    CHECK(c.n_expert == w.experts);
    CHECK(c.n_expert_used == 4);
    CHECK(c.n_ff == w.ffn);
    CHECK(c.n_vocab == w.vocab);
    CHECK(c.n_ctx_train == w.ctx);
    CHECK(c.swa_window == w.window);
    CHECK(c.swa_period == 2);  // even layers windowed, as gpt-oss alternates from its first layer
    CHECK(c.rope_base == 150000.0f);
    CHECK(c.rms_eps == 1e-5f);
    CHECK(c.yarn.ext_factor == 1.0f);  // YaRN, 32x from 4096
    CHECK(c.yarn.freq_scale == 1.0f / 32);
    CHECK(c.yarn.n_ctx_orig == 4096);
    // The engine's own tensor checks (presence, shape, type; biases and sinks F32) pass.
    const llm::ModelWeights weights = llm::map_weights(f, c);
    CHECK(weights.layers.size() == w.layers);
    const std::string last = "blk." + std::to_string(w.layers - 1) + ".";
    auto type = [&](const std::string& name) { return f.find_tensor(name) ? f.find_tensor(name)->type_id : ~0u; };
    CHECK(type(last + "ffn_up_exps.weight") == uint32_t(gguf::GgmlType::MXFP4));
    CHECK(type(last + "attn_q.weight") == uint32_t(gguf::GgmlType::Q8_0));
    CHECK(type("token_embd.weight") == uint32_t(gguf::GgmlType::Q8_0));
    CHECK(type(last + "ffn_gate_inp.weight") == uint32_t(gguf::GgmlType::F32));
    CHECK(type(last + "ffn_down_exps.bias") == uint32_t(gguf::GgmlType::F32));
    CHECK(f.tensors().size() == 3 + 19 * size_t(w.layers));
  }
  // Each expert stack followed by its bias, as converted files place them: the dense part is pieces.
  const ModelLayout layout = model_layout(shape_named("tiny-gpt-oss"), uint32_t(gguf::GgmlType::MXFP4), "t");
  std::vector<std::string> names;
  for (const TensorPlan& t : layout.tensors) names.push_back(t.name);
  for (const char* stack : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
    const auto it = std::find(names.begin(), names.end(), std::string("blk.1.") + stack + ".weight");
    REQUIRE(it + 1 < names.end());
    CHECK(it[1] == std::string("blk.1.") + stack + ".bias");
  }
}

TEST_CASE("the gemma3 shapes are the published Gemma 3 270M's layout, as the engine reads it") {
  struct Want {
    const char* shape;
    uint32_t layers, embd, heads, head, ffn, vocab, ctx, window;
  };
  for (const Want& w : {Want{"gemma3-270m", 18, 640, 4, 256, 2048, 262144, 32768, 512},
                        Want{"tiny-gemma3", 6, 320, 4, 64, 512, 512, 512, 8}}) {
    INFO(w.shape);
    const auto [f, c] = header_of(w.shape, gguf::GgmlType::Q4_K);
    check_dims(f, c, {"gemma3", llm::Arch::kGemma3, w.layers, w.embd, w.heads, 1, w.head});
    CHECK(c.n_ff == w.ffn);
    CHECK(c.n_vocab == w.vocab);
    CHECK(c.n_ctx_train == w.ctx);
    CHECK(c.swa_window == w.window);
    CHECK(!c.layer_is_swa(5));  // every 6th layer global, the others windowed
    CHECK(c.layer_is_swa(4));
    CHECK(c.rope_base == 1000000.0f);
    CHECK(c.rms_eps == 1e-6f);
    const llm::ModelWeights weights = llm::map_weights(f, c);  // the engine's tensor checks pass
    CHECK(weights.layers.size() == w.layers);
    // The published file's 236 tensors: no output.weight (tied), 13 per layer.
    CHECK(f.find_tensor("output.weight") == nullptr);
    CHECK(f.tensors().size() == 2 + 13 * size_t(w.layers));
    // q4_k: Q4_K where rows are whole 256-element blocks (attn_output, ffn_down), Q5_0 where they are
    // not (rows of 640 or 320), as llama.cpp's quantizer falls back; q6_k falls back to Q8_0.
    auto type = [&](const gguf::GgufFile& g, const std::string& name) { return g.find_tensor(name) ? g.find_tensor(name)->type_id : ~0u; };
    CHECK(type(f, "blk.0.attn_output.weight") == uint32_t(gguf::GgmlType::Q4_K));
    CHECK(type(f, "blk.0.ffn_down.weight") == uint32_t(gguf::GgmlType::Q4_K));
    CHECK(type(f, "blk.0.attn_q.weight") == uint32_t(gguf::GgmlType::Q5_0));
    CHECK(type(f, "token_embd.weight") == uint32_t(gguf::GgmlType::Q5_0));
    CHECK(type(f, "blk.0.post_ffw_norm.weight") == uint32_t(gguf::GgmlType::F32));
    const Header q6 = header_of(w.shape, gguf::GgmlType::Q6_K);
    CHECK(type(q6.file, "blk.0.ffn_gate.weight") == uint32_t(gguf::GgmlType::Q8_0));
    CHECK(type(q6.file, "blk.0.ffn_down.weight") == uint32_t(gguf::GgmlType::Q6_K));
  }
  // gemma3 is dense: mxfp4 (MXFP4 experts) is refused.
  CHECK_THROWS_AS(model_layout(shape_named("gemma3-270m"), uint32_t(gguf::GgmlType::MXFP4), "t"), std::invalid_argument);
}
