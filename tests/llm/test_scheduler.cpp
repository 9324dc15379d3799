// The continuous-batching Scheduler (issue 37) over the CPU executor's slots, on a model generated on
// read (emu:gen): requests joining at different steps, more of them than slots (queued), one prompt
// longer than a pass (chunked), one cancelled mid-run with its slot reused, one ending at a stop
// token, greedy and seeded sampling (temperature 0.8, top-k 40, top-p 0.9): each request's tokens
// are, to the bit, those generate() gives it alone. Refusals leave the scheduler working. And top-p's
// candidate set on hand-made logits, after top-k as in llama.cpp's chain.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "examples/llm/engine/generate.h"
#include "examples/llm/engine/scheduler.h"

using namespace gpunvme;
using namespace gpunvme::llm;
using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::Equals;

namespace {

const std::string kDevice = "emu:gen,shape=tiny-qwen3moe,type=q4_k";
constexpr uint32_t kCtx = 40;
const SamplerOptions kSampled{.temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .seed = 0};

std::vector<uint32_t> tokens(uint32_t n, uint32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> t(n);
  for (auto& x : t) x = rng() % vocab;
  return t;
}

SeqRequest request(uint32_t prompt_len, uint32_t max_tokens, uint32_t vocab, uint32_t seed, bool sampled) {
  SamplerOptions s = sampled ? kSampled : SamplerOptions{};
  s.seed = seed;
  return {tokens(prompt_len, vocab, seed), max_tokens, s, {}};
}

// The request alone: generate() on an executor of one slot, with its own sampler.
std::vector<uint32_t> alone(const ModelOnDevice& m, const SeqRequest& r) {
  auto ex = make_cpu_executor(m, kCtx);
  Sampler s(r.sampling);
  return generate(*ex, r.prompt, r.max_tokens, s, r.stop_tokens, {}, [](uint32_t, std::span<const float>) {}).tokens;
}

// What the shared run saw of a request.
struct Seen {
  std::vector<uint32_t> tokens;
  Finish finish = Finish::none;
  int64_t last_step = -1;
};

}  // namespace

TEST_CASE("requests joining, queued, chunked, cancelled and stopped get the tokens they get alone", "[llm][scheduler]") {
  DeviceSet set({kDevice});
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
  DeviceSet set({kDevice});
  const ModelOnDevice m = open_model(set.namespaces());
  const uint32_t V = m.config.n_vocab;
  auto ex = make_cpu_executor(m, kCtx, CpuExecOptions{.max_seqs = 1});
  Scheduler sched(*ex, kCtx, {.max_queued = 2});
  REQUIRE_THROWS_AS(sched.submit({{}, 4, {}, {}}), std::invalid_argument);
  REQUIRE_THROWS_WITH(sched.submit({{}, 4, {}, {}}), Equals("the prompt is empty: a request needs at least one token"));
  REQUIRE_THROWS_WITH(sched.submit({{1, 2}, 0, {}, {}}), Equals("max_tokens is 0: a request generates at least one token"));
  REQUIRE_THROWS_WITH(sched.submit({tokens(30, V, 1), 11, {}, {}}),
                      Equals("a prompt of 30 tokens and max_tokens 11 need 41 positions, past the context (40 tokens): shorten the "
                             "prompt or lower max_tokens"));
  const SeqRequest r = request(4, 3, V, 7, true);
  const uint64_t a = sched.submit(r), b = sched.submit(r);
  REQUIRE_THROWS_AS(sched.submit(r), QueueFull);
  REQUIRE_THROWS_WITH(sched.submit(r), ContainsSubstring("2 requests already wait for a sequence slot (max queued 2)"));
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
