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

TEST_CASE("expert prefetch report: the summary line and the JSON members carry the counters and every layer's stall") {
  gpunvme::stream::PrefetchMetrics p;
  p.prefetches = 6;
  p.reads = 4;
  p.bytes_read = 4000000;
  p.hits = 3;
  p.wasted = 1;
  p.wasted_bytes = 1000000;
  p.stall_seconds = {0.5, 0.25, 1.0};
  p.read_seconds = {0.25, 0.125, 0.75};
  p.tail_seconds = {0.0625, 0, 0.125};
  gpunvme::stream::FetcherMetrics f;
  f.tokens = 7;
  f.faults = 9;
  CHECK(prefetch_json({.lag = true}, p, f) ==
        "\"prefetch\":true,\"prefetch_kind\":\"lag\",\"pregate_experts\":0,\"pregate_first\":0,\"prefetches\":6,\"prefetch_reads\":4,\"prefetch_bytes_read\":4000000,\"prefetch_hits\":3,"
        "\"prefetch_wasted\":1,\"prefetch_wasted_bytes\":1000000,\"prefetch_unsettled\":0,\"prefetch_cut\":0,\"prefetch_cut_bytes\":0,\"post_routing_faults\":9,\"stall_seconds\":1.750000,"
        "\"stall_read_seconds\":1.125000,\"compute_after_reads_seconds\":0.187500,"
        "\"stall_seconds_per_layer\":[0.500000,0.250000,1.000000]");
  CHECK(prefetch_summary({.lag = true}, p, f) ==
        "expert prefetch (one-token lag): 6 prefetches read 4 experts (4.0 MB): 3 hit (75 %), 1 wasted (1.0 MB); "
        "9 post-routing faults; layers waited 1.750 s for their experts (250.000 ms per fetch, 160.714 ms of it reading; "
        "most: layer 2, 1.000 s)");
  CHECK(prefetch_summary({.pregate = 3}, p, f).starts_with(
      "expert prefetch (pre-gating, best 3 predicted): 6 prefetches read 4 experts (4.0 MB): 3 hit (75 %)"));
  CHECK(prefetch_json({.pregate = 3}, p, f).starts_with("\"prefetch\":true,\"prefetch_kind\":\"pregate\",\"pregate_experts\":3,"));
  CHECK(prefetch_summary({.pregate = 3, .first = 2}, p, f).starts_with(
      "expert prefetch (pre-gating, best 3 predicted, 2 for the next token): 6 prefetches read 4 experts"));
  p.unsettled = 1;
  CHECK(prefetch_json({.pregate = 3, .first = 2}, p, f).starts_with(
      "\"prefetch\":true,\"prefetch_kind\":\"pregate\",\"pregate_experts\":3,\"pregate_first\":2,\"prefetches\":6,"));
  CHECK(prefetch_json({.pregate = 3, .first = 2}, p, f).find("\"prefetch_wasted_bytes\":1000000,\"prefetch_unsettled\":1,\"prefetch_cut\":0,\"prefetch_cut_bytes\":0,") !=
        std::string::npos);
  CHECK(prefetch_summary({}, {}, {}) ==
        "expert prefetch: off; 0 post-routing faults; layers waited 0.000 s for their experts (0.000 ms per fetch, 0.000 ms "
        "of it reading; most: layer 0, 0.000 s)");
}
