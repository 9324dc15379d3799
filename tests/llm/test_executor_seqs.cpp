// The executors' sequence slots (issue 37) through make_cpu_executor / make_gpu_executor, on a model
// generated on read (emu:gen): the CPU executor with two slots runs a greedy sequence beside another
// one in shared passes with the bits it has alone, frees a slot, and refuses bad slots and skipped
// positions. (The numbers, for every architecture rule: test_multi_seq.cpp; the GPU executor's slots:
// tests/gpu/test_llm_seqs.cpp.)
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "examples/llm/engine/executor.h"
#include "tests/llm/greedy_steps.h"

using namespace gpunvme;
using namespace gpunvme::llm;
using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::Equals;

namespace {

const std::string kDevice = "emu:gen,shape=tiny-qwen3moe,type=q4_k";

uint32_t argmax_of(std::span<const float> row) { return uint32_t(std::max_element(row.begin(), row.end()) - row.begin()); }

}  // namespace

TEST_CASE("the CPU executor's slots: a sequence beside another has its bits alone; bad slots and skips refused") {
  DeviceSet set({kDevice});
  const ModelOnDevice m = open_model(set.namespaces());
  const uint32_t V = m.config.n_vocab, steps = 4;
  std::vector<float> want;
  {
    auto lone = make_cpu_executor(m, 8);
    want = test::greedy_logits(*lone, steps);  // token 1 at 0, then greedy
  }
  auto ex = make_cpu_executor(m, 8, CpuExecOptions{.max_seqs = 2});
  REQUIRE(ex->max_seqs() == 2);
  // Slot 1: greedy_logits's sequence; slot 0: another (token 7 first), one pass for both per step.
  std::vector<float> got, other;
  uint32_t a = 1, b = 7;
  for (uint32_t pos = 0; pos < steps; ++pos) {
    const std::vector<PassToken> pass = {{b, 0, pos, true}, {a, 1, pos, true}};
    const std::span<const float> rows = ex->pass(pass);
    REQUIRE(rows.size() == 2 * size_t(V));
    other.insert(other.end(), rows.begin(), rows.begin() + V);
    got.insert(got.end(), rows.begin() + V, rows.end());
    b = argmax_of(rows.first(V));
    a = argmax_of(rows.subspan(V));
  }
  REQUIRE(got.size() == want.size());
  REQUIRE(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
  REQUIRE(std::memcmp(other.data(), want.data(), V * sizeof(float)) != 0);  // the neighbour differs: a mixed-up cache would show
  REQUIRE_THROWS_WITH(ex->end_sequence(2), Equals("sequence slot 2 does not exist: there are 2 (0..1; more need a larger max sequence count)"));
  const std::vector<PassToken> bad_slot = {{1, 2, 0, true}};
  REQUIRE_THROWS_WITH(ex->pass(bad_slot), ContainsSubstring("token 0 of the pass: sequence slot 2 does not exist"));
  ex->end_sequence(1);
  const std::vector<PassToken> skip = {{1, 1, steps, true}};
  REQUIRE_THROWS_WITH(ex->pass(skip), ContainsSubstring("which holds none: a sequence starts at position 0"));
  // Slot 1 again from 0 (a new sequence) is greedy_logits's first step again, beside slot 0 untouched.
  const std::vector<PassToken> again = {{1, 1, 0, true}};
  const std::span<const float> first = ex->pass(again);
  REQUIRE(std::memcmp(first.data(), want.data(), V * sizeof(float)) == 0);
  // The one-sequence form is slot 0's: it continues slot 0 where it is (4 positions).
  REQUIRE(ex->step(b, steps).size() == V);
  REQUIRE_THROWS_WITH(ex->step(b, steps + 2), ContainsSubstring("it would skip 5..5"));
}
