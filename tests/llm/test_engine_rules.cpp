// The engine's rules a hostile or careless input meets first (issue 32): RoPE over part of a head
// (rope.dimension_count) and llama.cpp's refusals of the values it cannot be, top-k 0 as llama.cpp's
// "no limit", and a run stopped, naming the position, at the first logits that are not finite; qwen3's and
// qwen3moe's and gpt-oss's configuration as llama.cpp reads it (issue 33).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <deque>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "examples/llm/compute/ops.h"
#include "examples/llm/engine/generate.h"
#include "examples/llm/engine/sampler.h"
#include "examples/llm/model/config.h"
#include "runtime/gguf/gguf_builder.h"

using namespace gpunvme;
using namespace gpunvme::llm;
using Catch::Matchers::ContainsSubstring;
namespace b = gpunvme::gguf::builder;

namespace {

// The rotation of (x, y) by theta, in double: what ggml's rope computes for one pair.
void rotate(double theta, double& x, double& y) {
  const double x0 = x, y0 = y;
  x = x0 * std::cos(theta) - y0 * std::sin(theta);
  y = x0 * std::sin(theta) + y0 * std::cos(theta);
}

// A head of 8 rotated over its first 4 dimensions: pair i turns by pos * base^(-2i / n_rot) (n_rot, not the
// head size), the pairs are (2i, 2i+1) for kNorm and (i, i + n_rot/2) for kNeox, dimensions 4..7 stay.
void check_partial_rope(RopeLayout layout) {
  const uint32_t head = 8, n_rot = 4, pos = 3;
  const float base = 100.0f;
  float h[head];
  std::vector<double> want(head);
  for (uint32_t i = 0; i < head; ++i) h[i] = float(want[i] = 0.25 * i - 0.6);
  for (uint32_t i = 0; i < n_rot / 2; ++i) {
    const double theta = pos * std::pow(double(base), -2.0 * i / n_rot);
    const uint32_t a = layout == RopeLayout::kNorm ? 2 * i : i, c = layout == RopeLayout::kNorm ? 2 * i + 1 : i + n_rot / 2;
    rotate(theta, want[a], want[c]);
  }
  rope_head(h, n_rot, pos, base, layout);
  for (uint32_t i = 0; i < head; ++i) {
    INFO("dimension " << i);
    CHECK(std::fabs(h[i] - want[i]) < 1e-5);
  }
  for (uint32_t i = n_rot; i < head; ++i) CHECK(h[i] == float(0.25 * i - 0.6));  // untouched, to the bit
}

// A header-only GGUF of `arch` with head size 64 (256 / 4 heads) and, when given, rope.dimension_count and
// `more` keys (u32, named without the "<arch>." prefix).
gguf::GgufFile header(const std::string& arch, std::optional<uint32_t> n_rot,
                      const std::vector<std::pair<std::string, uint32_t>>& more = {}) {
  b::Spec s;
  const std::string a = arch + ".";
  s.kvs = {b::kv_str("general.architecture", arch), b::kv_u32(a + "context_length", 512),
           b::kv_u32(a + "embedding_length", 256), b::kv_u32(a + "block_count", 1),
           b::kv_u32(a + "feed_forward_length", 512), b::kv_u32(a + "attention.head_count", 4)};
  if (arch == "gemma3") s.kvs.push_back(b::kv_u32(a + "attention.sliding_window", 16));
  if (n_rot) s.kvs.push_back(b::kv_u32(a + "rope.dimension_count", *n_rot));
  for (const auto& [key, value] : more) s.kvs.push_back(b::kv_u32(a + key, value));
  s.tensors.emplace_back("token_embd.weight", std::vector<uint64_t>{256, 10}, uint32_t(GgmlType::F32), 256 * 10 * 4);
  return gguf::GgufFile::parse(b::build(s).bytes);
}

// A pass whose logits are `row` (every position).
class FixedLogits final : public Executor {
 public:
  explicit FixedLogits(std::vector<float> row) : row_(std::move(row)) {}
  std::span<const float> pass(std::span<const PassToken> tokens) override {
    out_.clear();
    for (uint32_t i = 0; i < logit_rows(tokens); ++i) out_.insert(out_.end(), row_.begin(), row_.end());
    return out_;
  }
  uint32_t max_batch() const override { return 64; }
  ExecStats stats() const override { return {}; }
  std::string describe() const override { return "fixed logits"; }

 private:
  std::vector<float> row_, out_;
};

}  // namespace

TEST_CASE("RoPE over the first n_rot dimensions of a head, the rest unrotated", "[llm][rope]") {
  check_partial_rope(RopeLayout::kNorm);
  check_partial_rope(RopeLayout::kNeox);
}

TEST_CASE("rope.dimension_count: read, and refused as llama.cpp refuses it, naming the key", "[llm][rope]") {
  CHECK(read_config(header("llama", std::nullopt)).n_rot == 64);  // absent: the head size
  CHECK(read_config(header("llama", 64)).n_rot == 64);
  CHECK(read_config(header("gemma3", 16)).n_rot == 16);  // partial rotary (tests/llm: llama.cpp's tokens)
  const std::tuple<const char*, uint32_t, const char*> bad[] = {
      {"qwen2", 63, "qwen2.rope.dimension_count = 63 is odd"},
      {"llama", 65, "llama.rope.dimension_count = 65 is odd"},
      {"qwen2", 66, "qwen2.rope.dimension_count = 66 is more than the head size 64"},
      {"llama", 32, "llama.rope.dimension_count = 32 differs from the head size 64"},
      {"qwen2", 32, "qwen2.rope.dimension_count = 32 differs from the head size 64"},
      {"gemma3", 0, "gemma3.rope.dimension_count = 0 is out of range"},
  };
  for (const auto& [arch, n, why] : bad) {
    INFO(arch << " " << n);
    CHECK_THROWS_WITH(read_config(header(arch, n)), ContainsSubstring(why));
  }
}

// llama.cpp's src/models/qwen3.cpp and qwen3moe.cpp, and llama_model_rope_type (NEOX for both).
TEST_CASE("qwen3 and qwen3moe: NEOX RoPE, Q/K norms, the experts' width as llama.cpp reads it", "[llm][arch]") {
  const ModelConfig dense =
      read_config(header("qwen3", std::nullopt, {{"attention.key_length", 128}, {"expert_count", 8}, {"expert_used_count", 2}}));
  CHECK(dense.arch == Arch::kQwen3);
  CHECK(dense.rope == RopeLayout::kNeox);
  CHECK(dense.qk_norm);
  CHECK_FALSE(dense.post_norms);
  CHECK(dense.head_dim == 128);  // wider than 256 / 4, as Qwen3's real heads are
  CHECK(dense.q_dim() == 512);
  CHECK(dense.n_ff == 512);
  CHECK_FALSE(dense.is_moe());  // qwen3's graph has no experts, whatever expert_count says

  const std::vector<std::pair<std::string, uint32_t>> routed = {{"expert_count", 8}, {"expert_used_count", 2}};
  auto with = routed;
  with.emplace_back("expert_feed_forward_length", 128);
  const ModelConfig moe = read_config(header("qwen3moe", std::nullopt, with));
  CHECK(moe.arch == Arch::kQwen3Moe);
  CHECK(moe.rope == RopeLayout::kNeox);
  CHECK(moe.qk_norm);
  CHECK(moe.n_expert == 8);
  CHECK(moe.n_expert_used == 2);
  CHECK(moe.n_ff == 128);  // expert_feed_forward_length, not feed_forward_length (512)
  CHECK(moe.n_ff_from == "qwen3moe.expert_feed_forward_length = 128");

  // Without the key llama.cpp takes feed_forward_length / expert_used_count; the shape errors say so.
  const ModelConfig fallback = read_config(header("qwen3moe", std::nullopt, routed));
  CHECK(fallback.n_ff == 256);
  CHECK_THAT(fallback.n_ff_from, ContainsSubstring("no qwen3moe.expert_feed_forward_length") &&
                                     ContainsSubstring("feed_forward_length / expert_used_count = 512 / 2"));

  // Every qwen3moe layer is routed: llama.cpp refuses one without experts.
  CHECK_THROWS_WITH(read_config(header("qwen3moe", std::nullopt)), ContainsSubstring("qwen3moe.expert_count"));
  CHECK_THROWS_WITH(read_config(header("qwen3moe", std::nullopt, {{"expert_count", 8}})),
                    ContainsSubstring("qwen3moe.expert_used_count"));
  CHECK_THROWS_WITH(read_config(header("qwen3", 32)), ContainsSubstring("qwen3.rope.dimension_count = 32 differs from the head size 64"));
  CHECK_THROWS_WITH(read_config(header("qwen4", std::nullopt)), ContainsSubstring("qwen3, qwen3moe"));
}

// gpt-oss's header as the real GGUFs carry it: the u32 keys and YaRN as rope.scaling.* (type, factor,
// original context); `window` and `scaling` vary it.
static gguf::GgufFile gpt_oss_header(uint32_t window = 16, const std::string& scaling = "yarn") {
  b::Spec s;
  const std::string a = "gpt-oss.";
  const auto f32 = [](std::string k, float v) { return b::kv_raw(std::move(k), [v](b::Bytes& x) { x.put<uint32_t>(b::F32).put<float>(v); }); };
  s.kvs = {b::kv_str("general.architecture", "gpt-oss"), b::kv_u32(a + "context_length", 512),
           b::kv_u32(a + "embedding_length", 256), b::kv_u32(a + "block_count", 4),
           b::kv_u32(a + "feed_forward_length", 512), b::kv_u32(a + "attention.head_count", 4),
           b::kv_u32(a + "attention.head_count_kv", 2), b::kv_u32(a + "attention.key_length", 64),
           b::kv_u32(a + "attention.value_length", 64), b::kv_u32(a + "attention.sliding_window", window),
           b::kv_u32(a + "expert_count", 8), b::kv_u32(a + "expert_used_count", 4),
           b::kv_u32(a + "expert_feed_forward_length", 128), f32(a + "rope.freq_base", 150000.0f),
           b::kv_str(a + "rope.scaling.type", scaling), f32(a + "rope.scaling.factor", 32.0f),
           b::kv_u32(a + "rope.scaling.original_context_length", 4096)};
  s.tensors.emplace_back("token_embd.weight", std::vector<uint64_t>{256, 10}, uint32_t(GgmlType::F32), 256 * 10 * 4);
  return gguf::GgufFile::parse(b::build(s).bytes);
}

TEST_CASE("gpt-oss: its configuration as llama.cpp reads it (windows, YaRN, routing, biases, sinks)", "[llm][arch]") {
  const ModelConfig c = read_config(gpt_oss_header());
  CHECK(c.arch == Arch::kGptOss);
  CHECK(c.rope == RopeLayout::kNeox);
  CHECK(c.n_expert == 8);
  CHECK(c.n_expert_used == 4);
  CHECK(c.n_ff == 128);  // expert_feed_forward_length
  CHECK(c.gating == Gating::kSoftmaxSelected);  // top k of the raw logits, a softmax over those
  CHECK(c.act == FfnAct::kSwigluOai);
  CHECK(c.sinks);
  CHECK(c.biases);
  CHECK(std::string(c.ffn_norm) == "post_attention_norm");  // a const char*: compare the text
  // llama.cpp's pattern without the key: even layers windowed, odd layers global.
  CHECK(c.swa_window == 16);
  CHECK(c.layer_is_swa(0));
  CHECK_FALSE(c.layer_is_swa(1));
  CHECK(c.layer_is_swa(2));
  CHECK_FALSE(c.layer_is_swa(3));
  CHECK(c.rope_base_swa == 150000.0f);  // no rope.freq_base_swa: the windowed layers use freq_base
  // YaRN: ext_factor 1, freq_scale 1 / factor, the original context; the attention factor is
  // get_mscale(32) / (1 + 0.1 ln 32) = 1 (llama-context.cpp cancels what ggml's rope multiplies in).
  CHECK(c.yarn.ext_factor == 1.0f);
  CHECK(c.yarn.freq_scale == 1.0f / 32.0f);
  CHECK(c.yarn.n_ctx_orig == 4096);
  CHECK(std::fabs(c.yarn.attn_factor - 1.0f) < 1e-6f);

  // Refusals that name the key.
  CHECK_THROWS_WITH(read_config(gpt_oss_header(1024)),
                    ContainsSubstring("gpt-oss.attention.sliding_window = 1024 is larger than gpt-oss.context_length = 512"));
  CHECK_THROWS_WITH(read_config(gpt_oss_header(16, "longrope")),
                    ContainsSubstring("gpt-oss.rope.scaling.type = 'longrope' is not supported"));
}

TEST_CASE("top-k 0 samples from the whole vocabulary, as llama.cpp's k <= 0; top-k K from the K best", "[llm][sampler]") {
  // 1000 equal logits: top-k 40 keeps the 40 lowest ids (ties go to the lower id), top-k 0 all of them.
  const std::vector<float> flat(1000, 1.0f);
  for (uint32_t k : {40u, 0u}) {
    Sampler s({.temperature = 1.0f, .top_k = k, .seed = 7});
    std::set<uint32_t> seen;
    for (int i = 0; i < 400; ++i) seen.insert(s.pick(flat));
    INFO("top-k " << k);
    if (k) CHECK(*seen.rbegin() < k);
    else CHECK(*seen.rbegin() >= 500);  // 400 draws from 1000 ids: the largest is far above 40
  }
}

TEST_CASE("logits that are not finite stop generation at once, naming the position", "[llm][generate]") {
  std::vector<float> row(50, 0.5f);
  row[7] = 2.0f;
  // token_logits false: the executor's greedy pick (Executor::pass_greedy), held to the same refusal.
  for (bool token_logits : {true, false}) {
    INFO("token_logits " << token_logits);
    const GenerateOptions o{.token_logits = token_logits};
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      std::vector<float> r = row;
      r[31] = bad;
      FixedLogits ex(r);
      Sampler greedy({});
      std::vector<uint32_t> got;
      auto on_token = [&](uint32_t id, std::span<const float>) { got.push_back(id); };
      try {
        generate(ex, {1, 2, 3}, 8, greedy, {}, o, on_token);
        FAIL("no error");
      } catch (const NonFiniteLogits& e) {
        CHECK(e.position == 2);  // the prompt's last position: the first logits of the run
        CHECK_THAT(std::string(e.what()), ContainsSubstring("not finite") && ContainsSubstring("gpunvme verify"));
      }
      CHECK(got.empty());  // no token picked from them
    }
    FixedLogits ok(row);
    Sampler greedy({});
    const GenerateResult r = generate(ok, {1, 2, 3}, 4, greedy, {}, o, [&](uint32_t, std::span<const float> l) {
      CHECK(l.size() == (token_logits ? row.size() : 0));
    });
    CHECK(r.tokens == std::vector<uint32_t>{7, 7, 7, 7});
    CHECK(r.decode_steps == 3);
  }
}

TEST_CASE("greedy_pick: argmax and whether every logit is finite (the GPU's pick is held to it)", "[llm][sampler]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto pick = [](std::vector<float> v) { return greedy_pick(v); };
  CHECK(pick({1.0f, 3.0f, 3.0f}).id == 1);
  CHECK(pick({1.0f, 3.0f, 3.0f}).non_finite == 0);
  CHECK(pick({nan, 3.0f}).id == 0);
  CHECK(pick({nan, 3.0f}).non_finite == 1);
  CHECK(pick({1.0f, nan, 3.0f}).id == 2);
  CHECK(pick({1.0f, inf, inf}).id == 1);
  CHECK(pick({1.0f, inf}).non_finite == 1);
  CHECK(pick({-inf, -inf}).id == 0);
  CHECK(pick({-1.0f, -0.0f, 0.0f}).id == 1);  // +0 == -0: a tie, the first
}

TEST_CASE("generation stops at any end-of-generation token, not only EOS (gpt-oss: <|return|>, <|call|>)", "[llm][generate]") {
  std::vector<float> row(50, 0.5f);
  row[7] = 2.0f;  // greedy picks 7 every step
  FixedLogits ex(row);
  Sampler greedy({});
  auto none = [](uint32_t, std::span<const float>) {};
  const GenerateResult stop = generate(ex, {1, 2, 3}, 6, greedy, {2, 7, 40}, {}, none);
  CHECK(stop.tokens == std::vector<uint32_t>{7});
  CHECK(stop.stopped_at_eos);
  const GenerateResult on = generate(ex, {1, 2, 3}, 6, greedy, {2, 40}, {}, none);  // 7 is no EOG token
  CHECK(on.tokens.size() == 6);
  CHECK(!on.stopped_at_eos);
}

TEST_CASE("argmax: the first index of the largest logit, NaN skipped, at every length", "[llm][sampler]") {
  // The obvious loop is the reference the two-pass argmax must match.
  auto first_max = [](const std::vector<float>& v) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < v.size(); ++i)
      if (v[i] > v[best]) best = i;
    return best;
  };
  uint64_t state = 12345;
  auto next = [&] { return float(int64_t((state = state * 6364136223846793005ull + 1442695040888963407ull) >> 40) % 2001 - 1000) / 8; };
  for (uint32_t n : {1u, 2u, 7u, 8u, 9u, 16u, 17u, 63u, 1000u, 262144u}) {
    std::vector<float> v(n);
    for (float& x : v) x = next();  // coarse values: ties are common
    INFO("n = " << n);
    CHECK(llm::argmax(v) == first_max(v));
    v.back() = 1e6f;  // the largest in the tail the lanes do not cover
    CHECK(llm::argmax(v) == n - 1);
    if (n > 3) {
      v[1] = v[2] = 2e6f;  // a tie: the first
      CHECK(llm::argmax(v) == 1);
      v[1] = std::numeric_limits<float>::quiet_NaN();  // skipped, as the obvious loop does
      CHECK(llm::argmax(v) == first_max(v));
      v[0] = std::numeric_limits<float>::quiet_NaN();  // a NaN first: 0, as the obvious loop gives
      CHECK(llm::argmax(v) == first_max(v));
    }
  }
  CHECK(llm::argmax(std::vector<float>{-3.0f, -1.0f, -1.0f, -2.0f}) == 1);
}

namespace {

// Logits whose greedy pick after token t is (3t + 1) mod 50, or a row with NaN at token `bad`; with
// chains(), generate()'s chained loop over a queue, as the GPU executor's submit/collect behave.
class NextOf final : public Executor {
 public:
  explicit NextOf(bool chain, uint32_t bad = ~0u) : chain_(chain), bad_(bad) {}
  std::span<const float> pass(std::span<const PassToken> tokens) override {
    out_.clear();
    for (const PassToken& t : tokens)
      if (t.logits) append_row(t.id);
    ++passes_;
    return out_;
  }
  uint32_t max_batch() const override { return 64; }
  ExecStats stats() const override { return {}; }
  std::string describe() const override { return "next-of logits"; }
  bool chains() const override { return chain_; }
  void submit_greedy(PassToken t, bool previous_pick) override {
    REQUIRE(queue_.size() < 2);
    if (previous_pick) {
      REQUIRE(has_pick_);
      t.id = last_pick_.id;  // the device's copy of the pick before it
    }
    out_.clear();
    append_row(t.id);
    last_pick_ = greedy_pick(out_), has_pick_ = true;
    queue_.push_back(last_pick_);
    positions.push_back(t.pos);
    ++passes_;
  }
  GreedyPick collect_greedy() override {
    REQUIRE(!queue_.empty());
    const GreedyPick p = queue_.front();
    queue_.pop_front();
    return p;
  }
  uint32_t passes() const { return passes_; }
  size_t outstanding() const { return queue_.size(); }
  std::vector<uint32_t> positions;  // of the chained passes

 private:
  void append_row(uint32_t id) {
    std::vector<float> row(50, 0.0f);
    row[(3 * id + 1) % 50] = 1.0f;
    if (id == bad_) row[3] = std::numeric_limits<float>::quiet_NaN();
    out_.insert(out_.end(), row.begin(), row.end());
  }
  bool chain_;
  uint32_t bad_;
  std::vector<float> out_;
  std::deque<GreedyPick> queue_;
  GreedyPick last_pick_;
  bool has_pick_ = false;
  uint32_t passes_ = 0;
};

}  // namespace

TEST_CASE("chained greedy decoding: the tokens of pass-by-pass decoding, one pass run ahead at most, dropped at an end",
          "[llm][generate]") {
  auto none = [](uint32_t, std::span<const float>) {};
  Sampler greedy({});
  NextOf plain(false);
  const GenerateResult want = generate(plain, {1, 2, 3}, 12, greedy, {}, {}, none);
  REQUIRE(want.tokens.size() == 12);
  CHECK(want.tokens[0] == 10);  // (3 * 3 + 1) mod 50
  CHECK(want.tokens[1] == 31);
  const GenerateOptions picks{.token_logits = false};
  for (uint32_t n : {1u, 2u, 3u, 12u}) {
    INFO("n = " << n);
    NextOf ex(true);
    const GenerateResult r = generate(ex, {1, 2, 3}, n, greedy, {}, picks, none);
    CHECK(r.tokens == std::vector<uint32_t>(want.tokens.begin(), want.tokens.begin() + n));
    CHECK(r.decode_steps == n - 1);
    CHECK(ex.passes() == 1 + (n - 1));  // the prompt's pass and one a token after the first: none wasted
    CHECK(ex.outstanding() == 0);
    for (size_t i = 0; i < ex.positions.size(); ++i) CHECK(ex.positions[i] == 3 + i);
  }
  {  // an end-of-generation token at the 4th: the pass run ahead of it is run and dropped
    NextOf ex(true);
    const GenerateResult r = generate(ex, {1, 2, 3}, 12, greedy, {want.tokens[3]}, picks, none);
    CHECK(r.stopped_at_eos);
    CHECK(r.tokens == std::vector<uint32_t>(want.tokens.begin(), want.tokens.begin() + 4));
    CHECK(ex.passes() == 1 + 4);
    CHECK(ex.outstanding() == 0);
  }
  {  // a row that is not finite stops at its position, as without chaining
    NextOf ex(true, want.tokens[2]);
    std::vector<uint32_t> got;
    try {
      generate(ex, {1, 2, 3}, 12, greedy, {}, picks, [&](uint32_t id, std::span<const float>) { got.push_back(id); });
      FAIL("no error");
    } catch (const NonFiniteLogits& e) {
      CHECK(e.position == 5);  // the pass at 5 runs the third token
    }
    CHECK(got == std::vector<uint32_t>(want.tokens.begin(), want.tokens.begin() + 3));
  }
}
