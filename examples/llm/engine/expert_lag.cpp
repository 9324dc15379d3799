#include "examples/llm/engine/expert_lag.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <stdexcept>

namespace gpunvme::llm {

ExpertLag::ExpertLag(uint32_t k, std::vector<uint64_t> expert_bytes) : k_(k), bytes_(std::move(expert_bytes)), prev_(bytes_.size()) {
  if (k == 0) throw std::invalid_argument("ExpertLag: k must be at least 1");
}

void ExpertLag::token(std::span<const uint32_t> ids) {
  if (ids.size() != bytes_.size() * k_) throw std::invalid_argument("ExpertLag: one token needs layers x k ids");
  bool compared = false;
  for (size_t l = 0; l < bytes_.size(); ++l) {
    if (!bytes_[l]) continue;
    std::vector<uint32_t> cur(ids.begin() + l * k_, ids.begin() + (l + 1) * k_);
    std::sort(cur.begin(), cur.end());
    cur.erase(std::unique(cur.begin(), cur.end()), cur.end());
    if (!prev_[l].empty()) {
      std::vector<uint32_t> both, stale;
      std::set_intersection(cur.begin(), cur.end(), prev_[l].begin(), prev_[l].end(), std::back_inserter(both));
      std::set_difference(prev_[l].begin(), prev_[l].end(), cur.begin(), cur.end(), std::back_inserter(stale));
      c_.routed += cur.size();
      c_.predicted_hits += both.size();
      c_.wasted += stale.size();
      c_.wasted_bytes += stale.size() * bytes_[l];
      compared = true;
    }
    prev_[l] = std::move(cur);
  }
  c_.tokens += compared;
}

namespace {
double total(const std::vector<double>& v) {
  double t = 0;
  for (double x : v) t += x;
  return t;
}
}  // namespace

std::string prefetch_summary(PrefetchKind kind, const stream::PrefetchMetrics& p, const stream::FetcherMetrics& fetch) {
  const double stall = total(p.stall_seconds);
  size_t worst = 0;
  for (size_t i = 0; i < p.stall_seconds.size(); ++i)
    if (p.stall_seconds[i] > p.stall_seconds[worst]) worst = i;
  char b[512], how[96];
  if (kind.lag) std::snprintf(how, sizeof how, "one-token lag");
  else if (kind.first) std::snprintf(how, sizeof how, "pre-gating, best %u predicted, %u for the next token", kind.pregate, kind.first);
  else std::snprintf(how, sizeof how, "pre-gating, best %u predicted", kind.pregate);
  const int n = kind.on() ? std::snprintf(b, sizeof b,
                                   "expert prefetch (%s): %llu prefetches read %llu experts (%.1f MB): %llu hit "
                                   "(%.0f %%), %llu wasted (%.1f MB); ",
                                   how, (unsigned long long)p.prefetches, (unsigned long long)p.reads, p.bytes_read / 1e6,
                                   (unsigned long long)p.hits, p.reads ? 100.0 * double(p.hits) / double(p.reads) : 0.0,
                                   (unsigned long long)p.wasted, p.wasted_bytes / 1e6)
                   : std::snprintf(b, sizeof b, "expert prefetch: off; ");
  std::string s(b, size_t(std::max(n, 0)));
  std::snprintf(b, sizeof b,
                "%llu post-routing faults; layers waited %.3f s for their experts (%.3f ms per fetch, %.3f ms of it reading; "
                "most: layer %zu, %.3f s)",
                (unsigned long long)fetch.faults, stall, fetch.tokens ? 1e3 * stall / double(fetch.tokens) : 0.0,
                fetch.tokens ? 1e3 * total(p.read_seconds) / double(fetch.tokens) : 0.0, worst,
                p.stall_seconds.empty() ? 0.0 : p.stall_seconds[worst]);
  return s + b;
}

std::string prefetch_json(PrefetchKind kind, const stream::PrefetchMetrics& p, const stream::FetcherMetrics& fetch) {
  char b[1024];
  std::snprintf(b, sizeof b,
                "\"prefetch\":%s,\"prefetch_kind\":\"%s\",\"pregate_experts\":%u,\"pregate_first\":%u,\"prefetches\":%llu,\"prefetch_reads\":%llu,\"prefetch_bytes_read\":%llu,"
                "\"prefetch_hits\":%llu,\"prefetch_wasted\":%llu,\"prefetch_wasted_bytes\":%llu,\"prefetch_unsettled\":%llu,\"prefetch_cut\":%llu,\"prefetch_cut_bytes\":%llu,"
                "\"post_routing_faults\":%llu,\"stall_seconds\":%.6f,\"stall_read_seconds\":%.6f,"
                "\"compute_after_reads_seconds\":%.6f,\"stall_seconds_per_layer\":[",
                kind.on() ? "true" : "false", kind.name(), kind.pregate, kind.first, (unsigned long long)p.prefetches, (unsigned long long)p.reads,
                (unsigned long long)p.bytes_read, (unsigned long long)p.hits, (unsigned long long)p.wasted,
                (unsigned long long)p.wasted_bytes, (unsigned long long)p.unsettled, (unsigned long long)p.cut, (unsigned long long)p.cut_bytes, (unsigned long long)fetch.faults, total(p.stall_seconds),
                total(p.read_seconds), total(p.tail_seconds));
  std::string s = b;
  for (size_t i = 0; i < p.stall_seconds.size(); ++i) {
    std::snprintf(b, sizeof b, "%s%.6f", i ? "," : "", p.stall_seconds[i]);
    s += b;
  }
  return s + "]";
}

}  // namespace gpunvme::llm
