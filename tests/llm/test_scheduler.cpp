// The continuous-batching Scheduler (issue 37) over the CPU executor's slots, on a model generated on
// read (emu:gen): requests joining at different steps, more of them than slots (queued), one prompt
// longer than a pass (chunked), one cancelled mid-run with its slot reused, one ending at a stop
// token, greedy and seeded sampling (temperature 0.8, top-k 40, top-p 0.9): each request's tokens
// are, to the bit, those generate() gives it alone. Refusals leave the scheduler working. And top-p's
// candidate set on hand-made logits, after top-k as in llama.cpp's chain.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "examples/llm/engine/generate.h"
#include "examples/llm/engine/scheduler.h"
#include "tests/llm/tiny_model.h"

using namespace gpunvme::llm;
using gpunvme::llm::test::random_tokens;
using Catch::Matchers::Equals;

namespace {

// MoE (the pass's tokens route to different experts) and sliding-window attention.
const std::string kMoe = "emu:gen,shape=tiny-qwen3moe,type=q4_k", kGemma = "emu:gen,shape=tiny-gemma3,type=q6_k";
constexpr uint32_t kCtx = 40;
const SamplerOptions kSampled{.temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .seed = 0};


SeqRequest request(uint32_t prompt_len, uint32_t max_tokens, uint32_t vocab, uint32_t seed, bool sampled) {
  SamplerOptions s = sampled ? kSampled : SamplerOptions{};
  s.seed = seed;
  return {random_tokens(prompt_len, vocab, seed), max_tokens, s, {}};
}

// The request alone: generate() on an executor of one slot, with its own sampler.
std::vector<uint32_t> alone(const ModelOnDevice& m, const SeqRequest& r) {
  auto ex = make_cpu_executor(m, kCtx);
  Sampler s(r.sampling);
  return generate(*ex, r.prompt, r.max_tokens, s, r.stop_tokens, {}, [](uint32_t, std::span<const float>) {}).tokens;
}

// A stand-in executor of 8-token vocabulary: each row's best token is the fed token + 1 (NaN rows
// when `nan`); it counts the tokens each slot got in each pass.
class FakeExecutor : public Executor {
 public:
  FakeExecutor(uint32_t seqs, uint32_t batch) : seqs_(seqs), batch_(batch) {}
  std::span<const float> pass(std::span<const PassToken> tokens) override {
    rows_.clear();
    passes.emplace_back(seqs_, 0);
    for (const PassToken& t : tokens) {
      ++passes.back()[t.seq];
      if (!t.logits) continue;
      rows_.resize(rows_.size() + 8, nan ? NAN : 0.0f);
      if (!nan) rows_[rows_.size() - 8 + (t.id + 1) % 8] = 1;
    }
    return rows_;
  }
  uint32_t max_batch() const override { return batch_; }
  uint32_t max_seqs() const override { return seqs_; }
  ExecStats stats() const override { return {}; }
  std::string describe() const override { return "fake"; }
  bool nan = false;
  std::vector<std::vector<uint32_t>> passes;  // per pass, tokens per slot

 private:
  uint32_t seqs_, batch_;
  std::vector<float> rows_;
};

// What the shared run saw of a request.
struct Seen {
  std::vector<uint32_t> tokens;
  Finish finish = Finish::none;
  int64_t last_step = -1;
};

}  // namespace

TEST_CASE("requests joining, queued, chunked, cancelled and stopped get the tokens they get alone", "[llm][scheduler]") {
  const std::string device = GENERATE(kMoe, kGemma);
  CAPTURE(device);
  DeviceSet set({device});
  const ModelOnDevice m = open_model(set.namespaces());
  const uint32_t V = m.config.n_vocab;
  auto ex = make_cpu_executor(m, kCtx, CpuExecOptions{.max_seqs = 3, .max_batch = 6});
  Scheduler sched(*ex, kCtx);
  // A greedy, stopping at its 4th token alone; B sampled with a prompt of 14 (> 6 a pass: chunked);
  // C sampled, cancelled at step 5; D greedy, queued (three slots) until C leaves; E sampled, joins at step 3.
  std::vector<SeqRequest> reqs = {request(5, 10, V, 1, false), request(14, 6, V, 2, true), request(3, 20, V, 3, true),
                                  request(4, 5, V, 4, false), request(6, 8, V, 5, true)};
  reqs[0].stop_tokens = {alone(m, reqs[0])[3]};
  std::vector<std::vector<uint32_t>> want;
  for (const SeqRequest& r : reqs) want.push_back(alone(m, r));
  REQUIRE(want[0].size() <= 4);  // A stops (at the first occurrence of its stop token)
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < 4; ++i) ids.push_back(sched.submit(reqs[i]));
  REQUIRE(sched.queued() == 4);
  std::map<uint64_t, Seen> seen;
  for (int64_t step = 0; !sched.idle(); ++step) {
    REQUIRE(step < 100);
    if (step == 3) ids.push_back(sched.submit(reqs[4]));
    if (step == 5) REQUIRE(sched.cancel(ids[2]));
    if (step == 1) REQUIRE((sched.active() == 3 && sched.queued() == 1));  // D waits for a slot
    for (const SeqEvent& e : sched.step()) {
      Seen& s = seen[e.id];
      REQUIRE(s.finish == Finish::none);  // nothing after a sequence's last token
      if (s.last_step >= 0) REQUIRE(s.last_step + 1 == step);  // a decoding sequence gets a token every step
      s.tokens.push_back(e.token), s.finish = e.finish, s.last_step = step;
      REQUIRE(e.generated == s.tokens.size());
    }
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    CAPTURE(i);
    const Seen& s = seen[ids[i]];
    if (i == 2) {  // cancelled: what it got is the start of its run alone, and it got some
      REQUIRE(!s.tokens.empty());
      REQUIRE(s.tokens.size() < want[i].size());
      REQUIRE(std::equal(s.tokens.begin(), s.tokens.end(), want[i].begin()));
      REQUIRE(s.finish == Finish::none);
      continue;
    }
    REQUIRE(s.tokens == want[i]);
    REQUIRE(s.finish == (reqs[i].stop_tokens.count(s.tokens.back()) ? Finish::stop : Finish::length));
  }
  REQUIRE(seen[ids[0]].finish == Finish::stop);
  // Sampling is exercised: B sampled differs from B greedy.
  SeqRequest greedy_b = reqs[1];
  greedy_b.sampling = {};
  REQUIRE(alone(m, greedy_b) != want[1]);
  const SchedulerCounters& c = sched.counters();
  REQUIRE(c.cancelled == 1);
  REQUIRE(c.finished == 4);
  REQUIRE(c.prompt_tokens == 5 + 14 + 3 + 4 + 6);
  REQUIRE(c.pass_tokens <= 6 * c.passes);
  uint64_t generated = 0;
  for (const auto& [id, s] : seen) generated += s.tokens.size();
  REQUIRE(c.generated_tokens == generated);
  // Every token generated went back in the next pass but each sequence's last one (C's too: cancelled between steps).
  REQUIRE(c.pass_tokens == c.prompt_tokens + generated - reqs.size());
}

TEST_CASE("bad requests are refused with the reason, a full queue says so, and the scheduler keeps working", "[llm][scheduler]") {
  DeviceSet set({kMoe});
  const ModelOnDevice m = open_model(set.namespaces());
  const uint32_t V = m.config.n_vocab;
  auto ex = make_cpu_executor(m, kCtx, CpuExecOptions{.max_seqs = 1});
  Scheduler sched(*ex, kCtx, {.max_queued = 2});
  REQUIRE_THROWS_AS(sched.submit({{}, 4, {}, {}}), std::invalid_argument);
  REQUIRE_THROWS_WITH(sched.submit({{}, 4, {}, {}}), Equals("the prompt is empty: a request needs at least one token"));
  REQUIRE_THROWS_WITH(sched.submit({{1, 2}, 0, {}, {}}), Equals("max_tokens is 0: a request generates at least one token"));
  REQUIRE_THROWS_WITH(sched.submit({random_tokens(30, V, 1), 11, {}, {}}),
                      Equals("a prompt of 30 tokens and max_tokens 11 need 41 positions, past the context (40 tokens): shorten the "
                             "prompt or lower max_tokens"));
  SeqRequest hot = request(4, 3, V, 7, true);
  hot.sampling.temperature = NAN;
  REQUIRE_THROWS_WITH(sched.submit(hot), Equals("temperature nan, top_p 0.900000: temperature takes 0 (greedy) or more, top_p 0 to 1 (1: off)"));
  hot.sampling.temperature = 1, hot.sampling.top_p = -1;
  REQUIRE_THROWS_AS(sched.submit(hot), std::invalid_argument);
  const SeqRequest r = request(4, 3, V, 7, true);
  const uint64_t a = sched.submit(r), b = sched.submit(r);
  REQUIRE_THROWS_AS(sched.submit(r), QueueFull);
  REQUIRE_THROWS_WITH(sched.submit(r), Equals("2 requests already wait for a sequence slot (max queued 2): try again later"));
  REQUIRE_FALSE(sched.cancel(999));
  REQUIRE(sched.cancel(b));  // from the queue
  REQUIRE_FALSE(sched.cancel(b));
  REQUIRE(sched.queued() == 1);
  std::vector<uint32_t> got;
  while (!sched.idle())
    for (const SeqEvent& e : sched.step()) {
      REQUIRE(e.id == a);
      got.push_back(e.token);
    }
  REQUIRE(got == alone(m, r));
  REQUIRE(sched.step().empty());  // idle: no pass
  REQUIRE_FALSE(sched.cancel(a));  // finished
}

TEST_CASE("top-p keeps the fewest most likely tokens reaching p, counted after top-k", "[llm][sampler]") {
  // Probabilities 0.05, 0.5, 0.15, 0.3 at indices 0..3 (logits their logs).
  const std::vector<float> logits = {std::log(0.05f), std::log(0.5f), std::log(0.15f), std::log(0.3f)};
  const std::vector<uint32_t> sorted = top_k(logits, 4);
  REQUIRE(sorted == std::vector<uint32_t>{1, 3, 2, 0});
  CHECK(top_p_count(logits, sorted, 0.0f) == 1);
  CHECK(top_p_count(logits, sorted, 0.45f) == 1);
  CHECK(top_p_count(logits, sorted, 0.6f) == 2);
  CHECK(top_p_count(logits, sorted, 0.85f) == 3);
  CHECK(top_p_count(logits, sorted, 0.96f) == 4);
  CHECK(top_p_count(logits, sorted, 1.0f) == 4);
  // Top-k 2 first: the two left are 0.625 and 0.375 among themselves, so top-p 0.6 keeps one.
  CHECK(top_p_count(logits, std::span(sorted).first(2), 0.6f) == 1);
  auto picks = [&](SamplerOptions o) {
    Sampler s(o);
    std::set<uint32_t> got;
    for (int i = 0; i < 300; ++i) got.insert(s.pick(logits));
    return got;
  };
  CHECK(picks({.temperature = 1.0f, .top_k = 0, .top_p = 0.6f, .seed = 3}) == std::set<uint32_t>{1, 3});
  CHECK(picks({.temperature = 1.0f, .top_k = 2, .top_p = 0.6f, .seed = 3}) == std::set<uint32_t>{1});
  CHECK(picks({.temperature = 1.0f, .top_k = 0, .top_p = 0.85f, .seed = 3}) == std::set<uint32_t>{1, 3, 2});
  CHECK(picks({.temperature = 1.0f, .top_k = 0, .seed = 3}) == std::set<uint32_t>{0, 1, 2, 3});  // off by default
}

TEST_CASE("no more sequences at once than a pass holds tokens; NaN logits are refused before anything moves", "[llm][scheduler]") {
  FakeExecutor ex(3, 2);  // three slots, passes of two tokens: two sequences at once, the third queued
  Scheduler sched(ex, 64);
  for (uint32_t i = 0; i < 3; ++i) sched.submit({{i, i}, 4, {}, {}});
  std::map<uint64_t, std::vector<uint32_t>> got;
  std::map<uint64_t, int> last_step;
  for (int step = 0; !sched.idle(); ++step) {
    REQUIRE(step < 20);
    REQUIRE(sched.active() <= 2);
    for (const SeqEvent& e : sched.step()) {
      if (last_step.count(e.id)) REQUIRE(last_step[e.id] + 1 == step);  // decoding: a token every pass
      last_step[e.id] = step;
      got[e.id].push_back(e.token);
    }
  }
  // Passes of 2 tokens at most; each sequence's tokens count up from its prompt's as the fake's rows say.
  for (const auto& p : ex.passes) REQUIRE(p[0] + p[1] + p[2] <= 2);
  REQUIRE(got.size() == 3);
  for (const auto& [id, toks] : got) REQUIRE(toks == std::vector<uint32_t>{uint32_t(id), uint32_t(id + 1), uint32_t(id + 2), uint32_t(id + 3)});
  sched.submit({{5}, 3, {}, {}});
  ex.nan = true;
  const SchedulerCounters before = sched.counters();
  REQUIRE_THROWS_AS(sched.step(), NonFiniteLogits);
  REQUIRE(sched.counters().generated_tokens == before.generated_tokens);
  ex.nan = false;
  const std::vector<SeqEvent> after = sched.step();  // it carries on where it stood
  REQUIRE(after.size() == 1);
  REQUIRE(after[0].token == 6);
}
