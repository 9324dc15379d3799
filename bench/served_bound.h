// A benchmark cell's I/O floor from the bytes its modeled drives served during the timed tokens
// (bench/llm_tokens' bound). The residency plan's bound (examples/llm/engine/residency_plan.h) expects
// the RAM expert cache to hit its share of uniformly routed experts; the LRU with the prefetch and
// pre-gating hits more, so a cell could read above it (Qwen3-235B-A22B 22G:32G on pcie4: 116 %): an
// expectation, not a floor. What a drive served it had to move, whatever the cache did: no token ends
// before the busiest drive moved its share at its rated rate. So the floor is that, measured, beside
// the host link's (every routed expert not in VRAM crosses the link, hit or miss: the plan's link
// bytes do not depend on the cache, and the caller passes their time).
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpunvme::bench {

// Bytes each drive served between two readings of the same drives in the same order (after - before).
inline std::vector<uint64_t> served_between(std::span<const uint64_t> before, std::span<const uint64_t> after) {
  if (before.size() != after.size())
    throw std::invalid_argument("served_between: " + std::to_string(before.size()) + " drives before, " +
                                std::to_string(after.size()) + " after");
  std::vector<uint64_t> d(after.size());
  for (size_t i = 0; i < d.size(); ++i) {
    if (after[i] < before[i]) throw std::invalid_argument("served_between: drive " + std::to_string(i) + "'s count went back");
    d[i] = after[i] - before[i];
  }
  return d;
}

// Every drive's bytes per token, summed: the NVMe bytes a token cost.
inline double served_bytes_per_token(std::span<const uint64_t> served, uint32_t tokens) {
  if (tokens == 0) throw std::invalid_argument("served_bytes_per_token: no tokens");
  double s = 0;
  for (uint64_t b : served) s += double(b);
  return s / tokens;
}

// Seconds a token takes at least: max(the busiest drive's bytes per token / drive_bytes_per_s (each
// drive's rated read rate), link_seconds). drive_bytes_per_s 0 (drive none, unthrottled): the drives
// bound nothing. A striped set's members and --drive-per-gpu's drives are separate drives here: the
// busiest one, not the sum over all of them at N times the rate (which an uneven split would beat).
inline double served_bound_seconds(std::span<const uint64_t> served, uint32_t tokens, double drive_bytes_per_s, double link_seconds) {
  if (tokens == 0) throw std::invalid_argument("served_bound_seconds: no tokens");
  uint64_t busiest = 0;
  for (uint64_t b : served) busiest = std::max(busiest, b);
  const double drive = drive_bytes_per_s > 0 ? double(busiest) / tokens / drive_bytes_per_s : 0;
  return std::max(drive, link_seconds);
}

}  // namespace gpunvme::bench
