// Batched passes of the CPU forward pass (the reference executor) against single-token passes, to the
// bit: the same tokens give the same logits whether a pass carries one token or many, for every
// architecture rule and weight type, across chunk boundaries, and after a pass is rolled back (a
// speculative pass whose drafts were rejected). Also the matrix kernel alone, the prompt-lookup drafter
// and the verification rule.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/generators/catch_generators_range.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "examples/llm/compute/batched_ops.h"
#include "examples/llm/compute/cpu_forward.h"
#include "examples/llm/engine/draft.h"
#include "examples/llm/engine/sampler.h"
#include "examples/llm/engine/speculative.h"
#include "tiny_model.h"

using namespace gpunvme;
using namespace gpunvme::llm;
using gpunvme::llm::test::Shape;
using gpunvme::llm::test::random_tokens;
using gpunvme::llm::test::same_bits;

namespace {

constexpr GgmlType kAllTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                                  GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// Logits of tokens[i] at position i, one token per pass.
std::vector<float> one_by_one(const test::TinyModel& m, const std::vector<uint32_t>& tokens) {
  CpuForward f(m.c, m.w, m.bytes, uint32_t(tokens.size()));
  std::vector<float> all;
  for (uint32_t i = 0; i < tokens.size(); ++i) {
    const auto& l = f.eval(tokens[i], i);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

}  // namespace

TEST_CASE("dot_row_batch gives dot_row's bits for every vector, every weight type", "[llm][batched]") {
  const GgmlType t = GENERATE(from_range(std::begin(kAllTypes), std::end(kAllTypes)));
  const uint32_t n = GENERATE(1u, 2u, 7u, 16u);
  std::mt19937 rng(uint32_t(t) * 100 + n);
  const uint64_t cols = 512;
  const auto row = test::random_rows(t, cols, 1, rng);
  std::vector<float> x(n * cols), part(n), y(n * 3, -1.0f);
  std::normal_distribution<float> d;
  for (float& v : x) v = d(rng);
  dot_row_batch(t, row.data(), cols, x.data(), cols, n, part.data(), y.data(), 3);  // ldy 3: strided output
  for (uint32_t i = 0; i < n; ++i) {
    const float want = dot_row(t, row.data(), cols, &x[i * cols]);
    CAPTURE(gguf::ggml_type_name(uint32_t(t)), n, i);
    REQUIRE(std::memcmp(&want, &y[i * 3], 4) == 0);
    REQUIRE(std::isfinite(want));
  }
}

TEST_CASE("a batched pass gives, per token, the bits of single-token passes", "[llm][batched]") {
  struct Case { Shape shape; GgmlType type; const char* name; };
  std::vector<Case> cases;
  for (GgmlType t : kAllTypes) cases.push_back({Shape::kLlama, t, "llama"});
  cases.push_back({Shape::kQwen2, GgmlType::Q8_0, "qwen2 (QKV bias)"});
  cases.push_back({Shape::kQwen2, GgmlType::Q4_K, "qwen2 (QKV bias)"});
  cases.push_back({Shape::kGemma3, GgmlType::Q8_0, "gemma3 (sliding window 5, QK norm, post-norms, GeGLU)"});
  cases.push_back({Shape::kGemma3, GgmlType::Q6_K, "gemma3 (sliding window 5, QK norm, post-norms, GeGLU)"});
  cases.push_back({Shape::kMoe, GgmlType::Q4_K, "llama MoE (4 experts, top 2)"});
  cases.push_back({Shape::kMoe, GgmlType::Q5_0, "llama MoE (4 experts, top 2)"});
  cases.push_back({Shape::kQwen3Moe, GgmlType::Q4_K, "qwen3moe (QK norm, heads of 128, 4 experts of 256, top 2)"});
  cases.push_back({Shape::kQwen3Moe, GgmlType::Q8_0, "qwen3moe (QK norm, heads of 128, 4 experts of 256, top 2)"});
  const Case k = GENERATE_COPY(from_range(cases));
  CAPTURE(k.name, gguf::ggml_type_name(uint32_t(k.type)));
  const test::TinyModel m = test::make_tiny(k.shape, k.type);
  const uint32_t V = m.c.n_vocab;
  const std::vector<uint32_t> tokens = random_tokens(14, V, 7);
  const std::vector<float> want = one_by_one(m, tokens);
  REQUIRE(std::all_of(want.begin(), want.end(), [](float v) { return std::isfinite(v); }));

  // Every check below starts from a fresh cache and compares with the same one-by-one logits.
  {  // chunks of 5, 1 and 8 tokens, every row's logits
    CpuForward f(m.c, m.w, m.bytes, 14);
    uint32_t pos = 0;
    for (uint32_t len : {5u, 1u, 8u}) {
      const auto rows = f.eval_batch(std::span(tokens).subspan(pos, len), pos, true);
      CAPTURE(pos, len);
      REQUIRE(same_bits(rows, std::span(want).subspan(size_t(pos) * V, size_t(len) * V)));
      pos += len;
    }
  }
  {  // the whole prompt in one pass, the last row only
    CpuForward f(m.c, m.w, m.bytes, 14);
    REQUIRE(same_bits(f.eval_batch(tokens, 0, false), std::span(want).subspan(13 * size_t(V), V)));
  }
  {  // a rolled-back pass leaves no trace: rejected drafts are overwritten
    CpuForward f(m.c, m.w, m.bytes, 14);
    f.eval_batch(std::span(tokens).subspan(0, 6), 0, true);
    // A speculative pass at 6..11 whose drafts (positions 8..11) are wrong; 6 and 7 are kept.
    std::vector<uint32_t> pass = {tokens[6], tokens[7], (tokens[8] + 1) % V, 3, 4, 5};
    const auto rows = f.eval_batch(pass, 6, true);
    REQUIRE(same_bits(rows.subspan(0, 2 * size_t(V)), std::span(want).subspan(6 * size_t(V), 2 * size_t(V))));
    // The next pass starts at 8 and must see positions 0..7 only as they were kept.
    const auto next = f.eval_batch(std::span(tokens).subspan(8, 6), 8, true);
    REQUIRE(same_bits(next, std::span(want).subspan(8 * size_t(V), 6 * size_t(V))));
  }
}

TEST_CASE("a pass past the context or with a token outside the vocabulary is refused", "[llm][batched]") {
  const test::TinyModel m = test::make_tiny(Shape::kLlama, GgmlType::Q8_0);
  CpuForward f(m.c, m.w, m.bytes, 4);
  const std::vector<uint32_t> five = {1, 2, 3, 4, 5};
  REQUIRE_THROWS_WITH(f.eval_batch(five, 0, false), Catch::Matchers::Equals("position 4 is past the context (4 tokens)"));
  const std::vector<uint32_t> bad = {1, 300};
  REQUIRE_THROWS_WITH(f.eval_batch(bad, 0, false), Catch::Matchers::Equals("token id 300 is outside the vocabulary (300 tokens)"));
  REQUIRE_THROWS(f.eval_batch({}, 0, false));
}

TEST_CASE("prompt lookup drafts what followed the longest recurring suffix, most recent first", "[llm][draft]") {
  const LookupOptions o{.k = 3, .max_ngram = 3, .min_ngram = 1};
  // "a b c d | x b c" : suffix "b c" recurs at 1, followed by d x b.
  REQUIRE(draft_lookup(std::vector<uint32_t>{1, 2, 3, 4, 9, 2, 3}, o) == std::vector<uint32_t>{4, 9, 2});
  // the 3-gram "1 2 3" wins over the more recent 1-gram "3"
  REQUIRE(draft_lookup(std::vector<uint32_t>{1, 2, 3, 7, 8, 3, 5, 1, 2, 3}, o) == std::vector<uint32_t>{7, 8, 3});
  // the most recent occurrence of "5": followed by 6 only (the context ends there: fewer than k)
  REQUIRE(draft_lookup(std::vector<uint32_t>{5, 1, 5, 6, 5}, o) == std::vector<uint32_t>{6, 5});
  // nothing recurs; an empty or one-token context; k = 0
  REQUIRE(draft_lookup(std::vector<uint32_t>{1, 2, 3, 4}, o).empty());
  REQUIRE(draft_lookup(std::vector<uint32_t>{}, o).empty());
  REQUIRE(draft_lookup(std::vector<uint32_t>{7}, o).empty());
  REQUIRE(draft_lookup(std::vector<uint32_t>{1, 1}, LookupOptions{.k = 0}).empty());
  // a repeated token drafts itself again (the suffix "1 1" occurred at 0, followed by one more 1)
  REQUIRE(draft_lookup(std::vector<uint32_t>{1, 1, 1}, o) == std::vector<uint32_t>{1});
  // min_ngram 2: a lone recurring token is not enough
  REQUIRE(draft_lookup(std::vector<uint32_t>{5, 6, 7, 5}, LookupOptions{.k = 3, .max_ngram = 3, .min_ngram = 2}).empty());
}

TEST_CASE("verification keeps the drafts greedy decoding agrees with, and the pick after them", "[llm][speculative]") {
  const uint32_t V = 4;
  // Rows' argmax: 2, 3, 1, 0
  const std::vector<float> rows = {0, 0, 9, 0, /**/ 0, 0, 0, 9, /**/ 0, 9, 0, 0, /**/ 9, 0, 0, 0};
  auto greedy = [](std::span<const float> r) { return argmax(r); };
  const Verdict all = verify(std::vector<uint32_t>{2, 3, 1}, rows, V, greedy);
  REQUIRE(all.accepted == 3);
  REQUIRE(all.tokens == std::vector<uint32_t>{2, 3, 1, 0});
  REQUIRE(all.next_pos(10) == 14);
  const Verdict some = verify(std::vector<uint32_t>{2, 0, 1}, rows, V, greedy);
  REQUIRE(some.accepted == 1);
  REQUIRE(some.tokens == std::vector<uint32_t>{2, 3});  // d1, then the correction
  REQUIRE(some.next_pos(10) == 12);
  const Verdict none = verify(std::vector<uint32_t>{1, 3, 1}, rows, V, greedy);
  REQUIRE(none.accepted == 0);
  REQUIRE(none.tokens == std::vector<uint32_t>{2});
  const Verdict nodraft = verify({}, std::span(rows).subspan(0, V), V, greedy);
  REQUIRE(nodraft.tokens == std::vector<uint32_t>{2});
  REQUIRE_THROWS(verify(std::vector<uint32_t>{1}, rows, V, greedy));
}

TEST_CASE("verification with a seeded sampler picks what plain sampling picks", "[llm][speculative]") {
  // Plain decoding calls the sampler once per row in order; verification must make the same calls,
  // so the random stream stays in step. Rows that are near-uniform make the sampler's choice random.
  const uint32_t V = 8, K = 6;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 0.5f);
  std::vector<float> rows((K + 1) * V);
  for (float& x : rows) x = u(rng);
  Sampler plain({.temperature = 1.0f, .top_k = V, .seed = 42});
  std::vector<uint32_t> want;
  for (uint32_t i = 0; i <= K; ++i) want.push_back(plain.pick(std::span(rows).subspan(i * V, V)));
  // A draft that agrees with the first three picks, then not.
  std::vector<uint32_t> draft(want.begin(), want.begin() + 3);
  draft.push_back((want[3] + 1) % V);
  draft.push_back(0);
  Sampler spec({.temperature = 1.0f, .top_k = V, .seed = 42});
  const Verdict v = verify(draft, std::span(rows).subspan(0, (draft.size() + 1) * V), V,
                           [&](std::span<const float> r) { return spec.pick(r); });
  REQUIRE(v.accepted == 3);
  REQUIRE(v.tokens == std::vector<uint32_t>(want.begin(), want.begin() + 4));
}
