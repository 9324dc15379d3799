// Several sequences in one pass (issue 37), CPU forward pass: sequences of different prompt lengths
// decode greedily in shared passes, one joining after a few steps (its whole prompt riding with the
// others' decoding tokens), one leaving early and its slot reused by a new, shorter sequence, one
// rolling back rejected drafts: every sequence's tokens and logits are, to the bit, those it gets
// alone. Dense, MoE, sliding-window (gemma3) and sinks (gpt-oss) models. Bad use refused with the
// slot, the position or the count named, and leaving the slots as they were.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <utility>
#include <vector>

#include "examples/llm/compute/cpu_forward.h"
#include "examples/llm/engine/sampler.h"
#include "tiny_model.h"

using namespace gpunvme;
using namespace gpunvme::llm;
using Catch::Matchers::Equals;
using gpunvme::llm::test::Shape;
using gpunvme::llm::test::random_tokens;
using gpunvme::llm::test::same_bits;

namespace {

constexpr uint32_t kCtx = 24;

// A sequence's greedy run: the tokens picked, and the logits each was picked from, concatenated.
struct Run {
  std::vector<uint32_t> tokens;
  std::vector<float> logits;
  void pick(std::span<const float> row) {
    tokens.push_back(argmax(row));
    logits.insert(logits.end(), row.begin(), row.end());
  }
};

// The sequence alone, in a forward pass of one slot: its prompt in one pass, then a token per pass.
Run alone(const test::TinyModel& m, const std::vector<uint32_t>& prompt, uint32_t n_new) {
  CpuForward f(m.c, m.w, m.bytes, kCtx);
  Run r;
  r.pick(f.eval_batch(prompt, 0, false));
  for (uint32_t pos = uint32_t(prompt.size()); r.tokens.size() < n_new; ++pos) r.pick(f.eval(r.tokens.back(), pos));
  return r;
}

// A sequence of the shared run: what it is, when it joins and in which slot; where it stands.
struct Seq {
  std::vector<uint32_t> prompt;
  uint32_t n_new = 0, join = 0, slot = 0;
  uint32_t pos = 0;  // its next token's position (0: not started)
  bool left = false;  // done, and its slot freed
  Run got;
  bool done() const { return got.tokens.size() == n_new; }
};
Seq seq(std::vector<uint32_t> prompt, uint32_t n_new, uint32_t join, uint32_t slot) {
  Seq s;
  s.prompt = std::move(prompt), s.n_new = n_new, s.join = join, s.slot = slot;
  return s;
}

// The sequences run together, one pass per step: each active one's next token (a new one: its whole
// prompt, the last row's logits wanted), in an order that changes with the step. At `draft_steps`,
// sequence 0 drafts two wrong tokens after its own, all with logits: only the first row is kept and
// the next pass starts after it (a speculative pass's rollback, beside the others). A sequence that
// is done leaves: its slot is freed for one that joins later.
void together(const test::TinyModel& m, std::vector<Seq>& seqs, std::span<const uint32_t> draft_steps) {
  CpuForward f(m.c, m.w, m.bytes, kCtx, 3);
  std::vector<size_t> order(seqs.size());
  for (uint32_t step = 0; std::any_of(seqs.begin(), seqs.end(), [](const Seq& s) { return !s.done(); }); ++step) {
    for (size_t i = 0; i < order.size(); ++i) order[i] = step % 2 ? order.size() - 1 - i : i;
    std::vector<PassToken> pass;
    std::vector<size_t> row_of;  // the sequence each row of logits belongs to (drafts' rows: SIZE_MAX)
    for (size_t i : order) {
      Seq& s = seqs[i];
      if (s.join > step || s.done()) continue;
      if (s.pos == 0) {
        for (const Seq& o : seqs) REQUIRE((&o == &s || o.slot != s.slot || o.pos == 0 || o.left));  // the schedule reuses free slots only
        for (uint32_t p = 0; p < s.prompt.size(); ++p) pass.push_back({s.prompt[p], s.slot, p, p + 1 == s.prompt.size()});
        s.pos = uint32_t(s.prompt.size());
      } else {
        pass.push_back({s.got.tokens.back(), s.slot, s.pos++, true});
      }
      row_of.push_back(i);
      if (i == 0 && std::find(draft_steps.begin(), draft_steps.end(), step) != draft_steps.end())
        for (uint32_t d : {(s.got.tokens.back() + 1) % m.c.n_vocab, 5u}) {
          pass.push_back({d, s.slot, pass.back().pos + 1, true});
          row_of.push_back(SIZE_MAX);
        }
    }
    const std::span<const float> rows = f.eval_batch(pass);
    REQUIRE(rows.size() == row_of.size() * m.c.n_vocab);
    for (size_t r = 0; r < row_of.size(); ++r)
      if (row_of[r] != SIZE_MAX) seqs[row_of[r]].got.pick(rows.subspan(r * m.c.n_vocab, m.c.n_vocab));
    for (Seq& s : seqs)
      if (s.done() && !s.left) f.free_seq(s.slot), s.left = true;
  }
}

}  // namespace

TEST_CASE("sequences in shared passes, joining, leaving and reusing a slot, give the bits they give alone", "[llm][multi-seq]") {
  struct Case { Shape shape; GgmlType type; const char* name; };
  const Case k = GENERATE(Case{Shape::kLlama, GgmlType::Q8_0, "llama"}, Case{Shape::kQwen2, GgmlType::Q4_K, "qwen2 (QKV bias)"},
                          Case{Shape::kMoe, GgmlType::Q4_K, "llama MoE (4 experts, top 2)"},
                          Case{Shape::kQwen3Moe, GgmlType::Q8_0, "qwen3moe"},
                          Case{Shape::kGemma3, GgmlType::Q6_K, "gemma3 (sliding window 5)"},
                          Case{Shape::kGptOss, GgmlType::Q8_0, "gpt-oss (sinks, sliding window 5, expert biases)"});
  CAPTURE(k.name);
  const test::TinyModel m = test::make_tiny(k.shape, k.type);
  const uint32_t V = m.c.n_vocab;
  // A: the longest, throughout (it drafts at steps 4 and 9); B: leaves after 4 tokens; C joins at step
  // 2; D joins at step 6 in B's freed slot, with a prompt shorter than what B left in it.
  std::vector<Seq> seqs = {seq(random_tokens(7, V, 1), 14, 0, 0), seq(random_tokens(6, V, 2), 4, 0, 1), seq(random_tokens(4, V, 3), 9, 2, 2),
                           seq(random_tokens(3, V, 4), 6, 6, 1)};
  const uint32_t drafts[] = {4, 9};
  together(m, seqs, drafts);
  for (size_t i = 0; i < seqs.size(); ++i) {
    CAPTURE(i);
    const Run want = alone(m, seqs[i].prompt, seqs[i].n_new);
    REQUIRE(seqs[i].got.tokens == want.tokens);
    REQUIRE(same_bits(seqs[i].got.logits, want.logits));
  }
  // Different prompts, different numbers: a sequence reading another's cache would not go unseen.
  REQUIRE_FALSE(same_bits(std::span(seqs[1].got.logits).first(V), std::span(seqs[3].got.logits).first(V)));
}

TEST_CASE("a pass with a slot out of range, a skipped position or too many tokens is refused and changes nothing", "[llm][multi-seq]") {
  const test::TinyModel m = test::make_tiny(Shape::kLlama, GgmlType::Q8_0);
  CpuForward f(m.c, m.w, m.bytes, 8, 3, 4);
  const std::vector<uint32_t> prompt = {1, 2, 3};
  f.eval_batch(one_sequence(prompt, 0, false, 1));  // slot 1 holds 3 positions
  REQUIRE(f.seq_length(1) == 3);
  using P = std::vector<PassToken>;
  REQUIRE_THROWS_WITH(f.eval_batch(P{{4, 1, 3, true}, {7, 3, 0, true}}),
                      Equals("token 1 of the pass: sequence slot 3 does not exist: there are 3 (0..2; more need a larger max sequence count)"));
  REQUIRE_THROWS_WITH(f.eval_batch(P{{4, 1, 5, true}}),
                      Equals("token 0 of the pass is at position 5 of sequence slot 1, which holds 3 positions: it would skip 3..4 "
                             "(continue at 3, or start again at 0)"));
  REQUIRE_THROWS_WITH(f.eval_batch(P{{4, 0, 1, true}}),
                      Equals("token 0 of the pass is at position 1 of sequence slot 0, which holds none: a sequence starts at position 0"));
  REQUIRE_THROWS_WITH(f.eval_batch(P{{4, 1, 3, false}, {4, 0, 0, false}, {5, 1, 5, true}}),
                      Equals("token 2 of the pass is at position 5 of sequence slot 1 after its token at 3: a sequence's tokens in a pass "
                             "are at consecutive positions, in order"));
  REQUIRE_THROWS_WITH(f.eval_batch(P{{4, 1, 3, false}, {4, 1, 3, true}}),
                      Equals("token 1 of the pass is at position 3 of sequence slot 1 after its token at 3: a sequence's tokens in a pass "
                             "are at consecutive positions, in order"));
  REQUIRE_THROWS_WITH(f.eval_batch(P{{1, 0, 0}, {2, 0, 1}, {3, 0, 2}, {4, 1, 3}, {5, 2, 0, true}}),
                      Equals("a pass of 5 tokens: this one takes 1..4 (split it over passes)"));
  REQUIRE_THROWS_WITH(f.eval_batch(P{{1, 2, 8, true}}), Equals("position 8 is past the context (8 tokens) in sequence slot 2"));
  REQUIRE_THROWS_WITH(f.eval_batch(P{{1, 2, 0, true}, {300, 0, 0, true}}),
                      Equals("token id 300 is outside the vocabulary (300 tokens)"));
  REQUIRE_THROWS_WITH(f.free_seq(3), Equals("sequence slot 3 does not exist: there are 3 (0..2; more need a larger max sequence count)"));
  REQUIRE_THROWS_WITH(f.eval_batch(P{}), Equals("a pass needs at least one token"));
  // None of that changed a slot: slot 1 continues at 3 with the bits of the sequence run alone.
  REQUIRE(f.seq_length(0) == 0);
  REQUIRE(f.seq_length(1) == 3);
  REQUIRE(f.seq_length(2) == 0);
  const std::vector<uint32_t> more = {1, 2, 3, 9};
  CpuForward lone(m.c, m.w, m.bytes, 8);
  REQUIRE(same_bits(f.eval_batch(P{{9, 1, 3, true}}), lone.eval_batch(more, 0, false)));
  // A freed slot holds nothing: continuing it is a skip, starting it again at 0 is a new sequence.
  f.free_seq(1);
  REQUIRE_THROWS_WITH(f.eval_batch(P{{4, 1, 4, true}}),
                      Equals("token 0 of the pass is at position 4 of sequence slot 1, which holds none: a sequence starts at position 0"));
  REQUIRE(f.eval_batch(P{{4, 1, 0, false}, {5, 1, 1, true}}).size() == m.c.n_vocab);
  REQUIRE(f.seq_length(1) == 2);
  // A pass that starts a slot again before its length drops the rest (a rollback).
  REQUIRE(f.eval_batch(P{{6, 1, 1, true}}).size() == m.c.n_vocab);
  REQUIRE(f.seq_length(1) == 2);
  REQUIRE(f.eval_batch(P{{6, 1, 0, false}}).empty());  // no row asked for, none returned
  REQUIRE(f.seq_length(1) == 1);
}

TEST_CASE("the one-sequence form of a pass: sequence 0, consecutive positions, all rows or the last", "[llm][multi-seq]") {
  const std::vector<uint32_t> ids = {7, 8, 9};
  const std::vector<PassToken> last = one_sequence(ids, 4, false), all = one_sequence(ids, 4, true, 2);
  REQUIRE(logit_rows(last) == 1);
  REQUIRE(logit_rows(all) == 3);
  REQUIRE_NOTHROW(check_logit_rows(all, 3));
  REQUIRE_THROWS_WITH(check_logit_rows(all, 2), Equals("logits of 3 tokens asked; this executor returns at most 2"));
  for (uint32_t i = 0; i < 3; ++i) {
    CHECK(last[i].id == ids[i]);
    CHECK(last[i].pos == 4 + i);
    CHECK(last[i].seq == 0);
    CHECK(last[i].logits == (i == 2));
    CHECK(all[i].seq == 2);
  }
}
