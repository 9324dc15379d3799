// The one-token-lag prediction counters: hits, wasted experts and bytes, per layer, duplicates collapsed.
#include <catch2/catch_test_macros.hpp>

#include <stdexcept>
#include <vector>

#include "examples/llm/engine/expert_lag.h"

using namespace gpunvme::llm;

TEST_CASE("one-token-lag prediction: hits, waste and bytes per layer") {
  ExpertLag lag(2, {100, 0, 300});  // layer 1 is not counted (its experts are in VRAM)
  lag.token(std::vector<uint32_t>{1, 2, 5, 6, 3, 4});
  CHECK(lag.counts().tokens == 0);  // nothing to compare with yet
  lag.token(std::vector<uint32_t>{2, 7, 9, 9, 4, 3});
  // layer 0: {2,7} vs {1,2}: 1 hit, 1 wasted (1) of 100 B; layer 2: {3,4} vs {3,4}: 2 hits.
  CHECK(lag.counts().tokens == 1);
  CHECK(lag.counts().routed == 4);
  CHECK(lag.counts().predicted_hits == 3);
  CHECK(lag.counts().wasted == 1);
  CHECK(lag.counts().wasted_bytes == 100);
  lag.token(std::vector<uint32_t>{7, 7, 0, 0, 8, 9});
  // layer 0: {7} vs {2,7}: 1 hit, 1 wasted; layer 2: {8,9} vs {3,4}: 0 hits, 2 wasted of 300 B.
  CHECK(lag.counts().tokens == 2);
  CHECK(lag.counts().routed == 7);
  CHECK(lag.counts().predicted_hits == 4);
  CHECK(lag.counts().wasted_bytes == 100 + 100 + 600);
  CHECK(lag.counts().hit_rate() == 4.0 / 7);
  CHECK_THROWS_AS(lag.token(std::vector<uint32_t>{1, 2}), std::invalid_argument);
}
