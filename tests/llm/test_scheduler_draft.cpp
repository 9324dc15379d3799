// The Scheduler with lookup drafting (issue 37): each decoding sequence's segment of a pass is
// [last token, drafts...], verified through its own sampler. On a model generated on read (CPU
// executor), with repetitive prompts so that drafts are accepted: sequences joining, queued and
// leaving, greedy and seeded sampling, each getting the tokens it gets alone without drafts, in fewer
// passes; a stop token inside an accepted run. On a stand-in executor whose next token is a function
// of the token and its position (so drafts are accepted, or rejected where it says): max_tokens
// inside a run, drafts trimmed to the room decoding tokens and prompt chunks leave (tokens and rows of
// logits), and every pass obeying the slots' rules (rollbacks included).
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "examples/llm/compute/pass_tokens.h"
#include "examples/llm/engine/generate.h"
#include "examples/llm/engine/scheduler.h"
#include "tests/llm/tiny_model.h"

using namespace gpunvme::llm;
using gpunvme::llm::test::random_tokens;

namespace {

const std::string kMoe = "emu:gen,shape=tiny-qwen3moe,type=q4_k", kGemma = "emu:gen,shape=tiny-gemma3,type=q6_k";
constexpr uint32_t kCtx = 64;

// `period` random tokens, `times` times over: text that repeats itself, as lookup drafting wants.
std::vector<uint32_t> repetitive(uint32_t period, uint32_t times, uint32_t vocab, uint32_t seed) {
  const std::vector<uint32_t> p = random_tokens(period, vocab, seed);
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < times; ++i) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// The request alone and without drafts: generate() on an executor of one slot, with its own sampler.
std::vector<uint32_t> alone(const ModelOnDevice& m, const SeqRequest& r) {
  auto ex = make_cpu_executor(m, kCtx);
  Sampler s(r.sampling);
  return generate(*ex, r.prompt, r.max_tokens, s, r.stop_tokens, {}, [](uint32_t, std::span<const float>) {}).tokens;
}

// What a shared run gave each request: its tokens, grouped by the step that produced them.
struct Run {
  std::map<uint64_t, std::vector<uint32_t>> tokens;
  std::map<uint64_t, std::vector<std::vector<uint32_t>>> steps;
  std::map<uint64_t, Finish> finish;
  SchedulerCounters counters;
};

// Submits reqs[i] at step joins[i] and steps until idle; checks the events' order on the way.
Run run(Executor& ex, SchedulerOptions o, const std::vector<SeqRequest>& reqs, const std::vector<int>& joins) {
  Scheduler sched(ex, kCtx, o);
  Run out;
  std::vector<uint64_t> ids(reqs.size());
  for (int step = 0; step == 0 || !sched.idle() || step <= *std::max_element(joins.begin(), joins.end()); ++step) {
    REQUIRE(step < 200);
    for (size_t i = 0; i < reqs.size(); ++i)
      if (joins[i] == step) ids[i] = sched.submit(reqs[i]);
    std::map<uint64_t, std::vector<uint32_t>> got;
    for (const SeqEvent& e : sched.step()) {
      REQUIRE(out.finish.count(e.id) == 0);  // nothing after a sequence's last token
      out.tokens[e.id].push_back(e.token);
      REQUIRE(e.generated == out.tokens[e.id].size());  // each token its own event, in order
      got[e.id].push_back(e.token);
      if (e.finish != Finish::none) out.finish[e.id] = e.finish;
    }
    for (auto& [id, t] : got) out.steps[id].push_back(t);
  }
  // Keyed by request index from here on.
  Run by_index;
  for (size_t i = 0; i < reqs.size(); ++i) {
    by_index.tokens[i] = out.tokens[ids[i]];
    by_index.steps[i] = out.steps[ids[i]];
    by_index.finish[i] = out.finish.count(ids[i]) ? out.finish[ids[i]] : Finish::none;
  }
  by_index.counters = sched.counters();
  return by_index;
}

size_t most_in_a_step(const std::vector<std::vector<uint32_t>>& steps) {
  size_t n = 0;
  for (const auto& s : steps) n = std::max(n, s.size());
  return n;
}

// A stand-in executor of 8-token vocabulary whose rows' best token is next(id, pos); it checks every
// pass against the slots' rules (SeqSlots) and keeps the passes.
class FakeExecutor : public Executor {
 public:
  FakeExecutor(uint32_t seqs, uint32_t batch, uint32_t logit_rows) : slots_(seqs, kCtx), batch_(batch), logit_rows_(logit_rows) {}
  // Counting up, except that position 20 and on, in steps of 7, predict two ahead (a draft made from
  // the counting cycle is rejected there).
  static uint32_t next(uint32_t id, uint32_t pos) { return (id + (pos >= 20 && pos % 7 == 6 ? 2 : 1)) % 8; }
  std::span<const float> pass(std::span<const PassToken> tokens) override {
    slots_.check(tokens, batch_);
    check_logit_rows(tokens, logit_rows_);
    slots_.commit(tokens);
    passes.emplace_back(tokens.begin(), tokens.end());
    rows_.clear();
    for (const PassToken& t : tokens) {
      if (!t.logits) continue;
      rows_.resize(rows_.size() + 8, 0.0f);
      rows_[rows_.size() - 8 + next(t.id, t.pos)] = 1;
    }
    return rows_;
  }
  uint32_t max_batch() const override { return batch_; }
  uint32_t max_logit_rows() const override { return logit_rows_; }
  uint32_t max_seqs() const override { return slots_.count(); }
  void end_sequence(uint32_t seq) override { slots_.free(seq); }
  ExecStats stats() const override { return {}; }
  std::string describe() const override { return "fake"; }
  std::vector<std::vector<PassToken>> passes;

  // Greedy decoding of `prompt` alone, token by token: what the scheduler must give it.
  static std::vector<uint32_t> alone(const std::vector<uint32_t>& prompt, uint32_t max_tokens, uint32_t stop = 99) {
    std::vector<uint32_t> out;
    uint32_t t = prompt.back(), pos = uint32_t(prompt.size()) - 1;
    while (out.size() < max_tokens) {
      t = next(t, pos++);
      out.push_back(t);
      if (t == stop) break;
    }
    return out;
  }

 private:
  SeqSlots slots_;
  uint32_t batch_, logit_rows_;
  std::vector<float> rows_;
};

// Tokens per slot in a pass.
std::map<uint32_t, uint32_t> per_slot(const std::vector<PassToken>& pass) {
  std::map<uint32_t, uint32_t> n;
  for (const PassToken& t : pass) ++n[t.seq];
  return n;
}

const std::vector<uint32_t> kCycle = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2};  // the fake counts up: drafts are its guess

}  // namespace

TEST_CASE("with lookup drafts, sequences joining and leaving get the tokens they get alone without drafts, in fewer passes",
          "[llm][scheduler][draft]") {
  const std::string device = GENERATE(kMoe, kGemma);
  CAPTURE(device);
  DeviceSet set({device});
  const ModelOnDevice m = open_model(set.namespaces());
  const uint32_t V = m.config.n_vocab;
  // Greedy and seeded sampling (a low temperature and top-k 3: a random model's sampled text repeats
  // itself less). The prompts are patterns these generated models go on repeating (found by trying
  // periods and seeds; the weights are fixed), so that drafts are accepted.
  const SamplerOptions greedy{}, sampled{.temperature = 0.3f, .top_k = 3, .top_p = 0.95f, .seed = 9};
  auto rep = [&](uint32_t period, uint32_t seed) { return repetitive(period, 12 / period + 1, V, seed); };
  const bool moe = device == kMoe;
  std::vector<SeqRequest> reqs = {{moe ? rep(2, 7) : rep(6, 12), 24, greedy, {}}, {rep(3, 4), 20, sampled, {}},
                                  {moe ? rep(6, 5) : rep(5, 3), 18, greedy, {}}, {rep(4, 23), 22, sampled, {}},
                                  {random_tokens(5, V, 5), 16, greedy, {}}};
  // Three slots for five requests: the fourth and fifth wait for the first ones to leave; the third
  // joins at step 2, the fifth at step 4.
  const std::vector<int> joins = {0, 0, 2, 2, 4};
  auto ex = make_cpu_executor(m, kCtx, CpuExecOptions{.max_seqs = 3, .max_batch = 24});
  const Run plain = run(*ex, {}, reqs, joins);
  const Run drafted = run(*ex, {.draft = LookupOptions{.k = 6}}, reqs, joins);
  for (size_t i = 0; i < reqs.size(); ++i) {
    CAPTURE(i);
    const std::vector<uint32_t> want = alone(m, reqs[i]);
    REQUIRE(want.size() == reqs[i].max_tokens);
    REQUIRE(plain.tokens.at(i) == want);
    REQUIRE(drafted.tokens.at(i) == want);
    REQUIRE(drafted.finish.at(i) == Finish::length);
  }
  const SchedulerCounters& c = drafted.counters;
  CAPTURE(c.drafted_tokens, c.accepted_tokens, c.passes, plain.counters.passes);
  REQUIRE(c.accepted_tokens > 0);
  REQUIRE(c.accepted_tokens <= c.drafted_tokens);
  REQUIRE(plain.counters.drafted_tokens == 0);
  REQUIRE(c.passes < plain.counters.passes);
  REQUIRE(c.generated_tokens == plain.counters.generated_tokens);
  REQUIRE(c.prompt_tokens == plain.counters.prompt_tokens);
  // Every pass carried each decoding token once, its kept drafts and its rejected ones, and the prompts:
  // pass tokens = prompts + tokens fed back (all but each sequence's last) + drafts not kept.
  const uint64_t fed_back = c.generated_tokens - reqs.size();
  REQUIRE(c.pass_tokens == c.prompt_tokens + fed_back - c.accepted_tokens + c.drafted_tokens);
  // Accepted drafts reached a greedy sequence, and on the MoE model a sampled one: a step gave them
  // several tokens.
  REQUIRE(most_in_a_step(drafted.steps.at(0)) > 1);
  if (moe) REQUIRE(std::max(most_in_a_step(drafted.steps.at(1)), most_in_a_step(drafted.steps.at(3))) > 1);
  // Sampling is exercised: request 1 or 3 greedy differs from itself sampled.
  SeqRequest greedy1 = reqs[1], greedy3 = reqs[3];
  greedy1.sampling = greedy3.sampling = {};
  REQUIRE((alone(m, greedy1) != alone(m, reqs[1]) || alone(m, greedy3) != alone(m, reqs[3])));
}

TEST_CASE("a stop token inside an accepted draft run ends the sequence at it", "[llm][scheduler][draft]") {
  DeviceSet set({kMoe});
  const ModelOnDevice m = open_model(set.namespaces());
  const uint32_t V = m.config.n_vocab;
  auto ex = make_cpu_executor(m, kCtx, CpuExecOptions{.max_seqs = 2, .max_batch = 16});
  const SchedulerOptions o{.draft = LookupOptions{.k = 8}};
  // The model's own loop in the prompt: on this pattern it falls into a loop of three tokens; with the
  // first 9 tokens it generates added to the prompt, it goes on with the loop, so drafts copied from
  // the prompt are accepted and a token's first occurrence in the reply falls inside an accepted run.
  SeqRequest a{repetitive(2, 7, V, 7), 30, {}, {}};
  const std::vector<uint32_t> g = alone(m, a);
  a.prompt.insert(a.prompt.end(), g.begin(), g.begin() + 9);
  a.max_tokens = 12;
  std::vector<SeqRequest> reqs = {a, {repetitive(6, 3, V, 5), 30, {}, {}}};
  const Run first = run(*ex, o, reqs, {0, 1});
  // A token of request 0 that a step gave with tokens before and after it, at its first occurrence: as
  // a stop token, the sequence alone stops there, and with drafts it falls inside an accepted run.
  const std::vector<uint32_t>& toks = first.tokens.at(0);
  std::optional<uint32_t> stop;
  size_t at = 0;
  for (const auto& s : first.steps.at(0)) {
    for (size_t j = 1; j + 1 < s.size() && !stop; ++j)
      if (std::find(toks.begin(), toks.end(), s[j]) - toks.begin() == std::ptrdiff_t(at + j)) stop = s[j], at += j;
    if (stop) break;
    at += s.size();
  }
  REQUIRE(stop);
  reqs[0].stop_tokens = {*stop};
  const std::vector<uint32_t> want = alone(m, reqs[0]);
  REQUIRE(want.size() == at + 1);
  REQUIRE(want.back() == *stop);
  const Run second = run(*ex, o, reqs, {0, 1});
  REQUIRE(second.tokens.at(0) == want);
  REQUIRE(second.finish.at(0) == Finish::stop);
  REQUIRE(second.steps.at(0).back().size() > 1);  // the stop came inside a run of several tokens
  REQUIRE(second.tokens.at(1) == alone(m, reqs[1]));  // the other sequence goes on as alone
  REQUIRE(second.finish.at(1) == Finish::length);
}

TEST_CASE("drafts stop at max_tokens and the context, take only the room decoding tokens and prompts leave, and roll back",
          "[llm][scheduler][draft]") {
  SECTION("max_tokens inside what a draft could reach: the draft is cut, the last token says length") {
    FakeExecutor ex(1, 32, 32);
    Scheduler sched(ex, kCtx, {.draft = LookupOptions{.k = 8}});
    sched.submit({kCycle, 5, {}, {}});
    std::vector<std::vector<SeqEvent>> steps;
    while (!sched.idle()) steps.push_back(sched.step());
    // The prompt's pass gives 3; then 4 and a draft of 3 (5 - 2 tokens left after the pass's first) all
    // accepted: 4 5 6, and the pick after them, 7: the fifth token, in the second pass.
    REQUIRE(steps.size() == 2);
    REQUIRE(ex.passes[1].size() == 4);
    std::vector<uint32_t> got;
    for (const auto& s : steps)
      for (const SeqEvent& e : s) got.push_back(e.token);
    REQUIRE(got == std::vector<uint32_t>{3, 4, 5, 6, 7});
    REQUIRE(steps[1].back().finish == Finish::length);
    REQUIRE(steps[1].back().generated == 5);
    REQUIRE(sched.counters().drafted_tokens == 3);
    REQUIRE(sched.counters().accepted_tokens == 3);
  }
  SECTION("a stop token inside a run ends the sequence there, the rest of the run dropped") {
    FakeExecutor ex(1, 32, 32);
    Scheduler sched(ex, kCtx, {.draft = LookupOptions{.k = 8}});
    sched.submit({kCycle, 20, {}, {5}});
    std::vector<SeqEvent> events;
    while (!sched.idle())
      for (const SeqEvent& e : sched.step()) events.push_back(e);
    REQUIRE(events.size() == 3);  // 3, then 4 5 from the run 4 5 6 7 0 1 2 3 ...
    REQUIRE(events[1].token == 4);
    REQUIRE(events[2].token == 5);
    REQUIRE(events[2].finish == Finish::stop);
    REQUIRE(events[2].generated == 3);
    REQUIRE(sched.counters().drafted_tokens == 8);
    REQUIRE(sched.counters().accepted_tokens == 2);  // of the 8 drafts accepted, 4 and 5 became tokens
  }
  SECTION("a pass full of decoding tokens: drafts trimmed to an even share, prompt chunks before drafts") {
    FakeExecutor ex(4, 6, 32);
    Scheduler sched(ex, kCtx, {.draft = LookupOptions{.k = 8}});
    std::vector<std::vector<uint32_t>> prompts;
    for (uint32_t i = 0; i < 4; ++i) {
      std::vector<uint32_t> p = kCycle;
      p.push_back(3), p.push_back(4 + i % 2);  // ..., 1 2 3 4 or 1 2 3 5
      prompts.push_back(p);
      sched.submit({p, 20, {}, {}});
    }
    std::map<uint64_t, std::vector<uint32_t>> got;
    std::map<uint64_t, size_t> last_step;
    for (size_t step = 0; !sched.idle(); ++step) {
      REQUIRE(step < 60);
      for (const SeqEvent& e : sched.step()) {
        if (got.count(e.id)) REQUIRE(step - last_step[e.id] <= 1);  // a decoding sequence gets tokens every pass
        last_step[e.id] = step;
        got[e.id].push_back(e.token);
      }
    }
    for (uint64_t id = 1; id <= 4; ++id) REQUIRE(got[id] == FakeExecutor::alone(prompts[id - 1], 20));
    // Passes of 6: the prompts (13 tokens each) take every token until read; once all four decode,
    // the two tokens left are drafts, one each to the first two sequences admitted.
    bool trimmed = false;
    for (const auto& p : ex.passes) {
      REQUIRE(p.size() <= 6);
      const auto n = per_slot(p);
      const bool prompt = std::any_of(p.begin(), p.end(), [&](const PassToken& t) { return t.pos < 13; });
      const bool drafts = std::any_of(n.begin(), n.end(), [&](const auto& sc) {
        return std::count_if(p.begin(), p.end(), [&](const PassToken& t) { return t.seq == sc.first && t.pos >= 13; }) > 1;
      });
      // Drafts only in room no prompt wanted: every prompt in such a pass was read to its end (position 12).
      if (drafts && prompt)
        for (const auto& [slot, count] : n)
          if (std::any_of(p.begin(), p.end(), [&](const PassToken& t) { return t.seq == slot && t.pos < 13; }))
            REQUIRE(std::any_of(p.begin(), p.end(), [&](const PassToken& t) { return t.seq == slot && t.pos == 12; }));
      if (n.size() == 4 && !prompt) {
        REQUIRE(p.size() == 6);
        REQUIRE(n.at(0) == 2);
        REQUIRE(n.at(1) == 2);
        REQUIRE(n.at(2) == 1);
        REQUIRE(n.at(3) == 1);
        trimmed = true;
      }
    }
    REQUIRE(trimmed);
    REQUIRE(sched.counters().accepted_tokens > 0);
  }
  SECTION("rows of logits are room too: the executor's max_logit_rows bounds the drafts") {
    FakeExecutor ex(3, 40, 5);
    Scheduler sched(ex, kCtx, {.draft = LookupOptions{.k = 8}});
    for (uint32_t i = 0; i < 3; ++i) sched.submit({kCycle, 10, {}, {}});
    std::map<uint64_t, std::vector<uint32_t>> got;
    while (!sched.idle())
      for (const SeqEvent& e : sched.step()) got[e.id].push_back(e.token);
    for (uint64_t id = 1; id <= 3; ++id) REQUIRE(got[id] == FakeExecutor::alone(kCycle, 10));
    // The second pass: three decoding tokens and two drafts (5 rows), one each to the first two.
    REQUIRE(per_slot(ex.passes[1]) == std::map<uint32_t, uint32_t>{{0, 2}, {1, 2}, {2, 1}});
  }
  SECTION("rejected drafts are rolled back: the next pass starts after the kept ones") {
    // From position 20 the fake predicts two ahead at 20, 27, 34: the counting drafts are rejected there.
    FakeExecutor ex(2, 32, 32);
    Scheduler sched(ex, kCtx, {.draft = LookupOptions{.k = 8}});
    sched.submit({kCycle, 40, {}, {}});
    sched.submit({kCycle, 30, {}, {}});
    std::map<uint64_t, std::vector<uint32_t>> got;
    while (!sched.idle())
      for (const SeqEvent& e : sched.step()) got[e.id].push_back(e.token);
    REQUIRE(got[1] == FakeExecutor::alone(kCycle, 40));  // every pass passed SeqSlots' checks on the way
    REQUIRE(got[2] == FakeExecutor::alone(kCycle, 30));
    const SchedulerCounters& c = sched.counters();
    REQUIRE(c.accepted_tokens < c.drafted_tokens);  // some were rejected
    REQUIRE(c.accepted_tokens > 0);
    // The last draft never reaches past max_tokens, nor the context: every position < 11 + 40.
    for (const auto& p : ex.passes)
      for (const PassToken& t : p) REQUIRE(t.pos < 11 + 40);
  }
}
