// A MoE cell's second floor when no expert prefetch ran (bench/llm_tokens, issue #33): the dependent chain.
// With the prefetch off, a layer's expert reads are issued only once that layer's router has run on the
// GPU, and the next layer's router needs this layer's experts computed; so the drive idles for everything
// a token does outside its expert reads (each layer's attention and router, the expert kernels that
// follow the last read, the head, the host between tokens). The bytes / bandwidth floor
// (served_bound.h) assumes the drive never idles, which this chain forbids. The chain floor is the time
// the token spent outside its reads, measured in the same run (wall time less the fetches' stall: GPU
// clocks from each fetched layer's routing done to its reads done, gpu_expert_pump.cu), plus the expert
// bytes at the drives' rated rate: what the token would take if its reads ran at the drive's rate and
// nothing else changed. It is never below the bytes floor (the larger of the two is taken). With a drive
// per GPU (--drive-per-gpu) each GPU's expert bytes count at its own drive's rate, the GPUs' in turn
// (ChainReads): the GPUs run their layer ranges one after another, so their fetches never overlap, and
// the shared controller, which reads no experts then, adds nothing.
// Pure arithmetic; the caller reads the counters before and after the timed tokens.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>

namespace gpunvme::bench {

// Seconds a per-layer clock (stall_seconds etc. of stream::PrefetchMetrics, one entry per layer, summed
// over every fetch so far) added between two readings. `before` may be empty (no fetch yet).
inline double added_seconds(std::span<const double> before, std::span<const double> after) {
  if (!before.empty() && before.size() != after.size())
    throw std::invalid_argument("added_seconds: " + std::to_string(before.size()) + " layers before, " + std::to_string(after.size()) + " after");
  const double d = std::accumulate(after.begin(), after.end(), 0.0) - std::accumulate(before.begin(), before.end(), 0.0);
  if (d < -1e-9) throw std::invalid_argument("added_seconds: a clock went back");
  return std::max(d, 0.0);
}

// What the timed tokens did, totals over all of them.
struct ChainTimes {
  double wall_seconds = 0;         // host wall time of the timed tokens
  double stall_seconds = 0;        // every fetch's routing done -> reads done (GPU clock)
  double read_seconds = 0;         // of it, reads written -> reads done (the rest: placement and launches)
  double after_reads_seconds = 0;  // reads done -> the layer's expert kernels done (part of the time outside)
  uint64_t expert_bytes = 0;       // bytes the expert fetches read from the drives
  uint64_t fetches = 0;            // expert fetches (one per fetched layer and token)
};

// Per token, in seconds, except where said.
struct ChainBound {
  double seconds = 0;               // the floor: max(bytes floor, outside + read floor)
  double outside_seconds = 0;       // wall - stall: the drive idle for the experts (what the reads wait for)
  double after_reads_seconds = 0;   // of outside: the expert kernels after each layer's last read
  double read_floor_seconds = 0;    // expert bytes at their drives' rated rates (ChainReads)
  double stall_seconds = 0, read_seconds = 0;
  double fetches = 0;               // expert fetches per token
  // Per fetch: how much longer than the drive's rated rate it kept the token waiting (placement, launches,
  // the first read's latency, completion polling): stall less read floor, over the fetches.
  double overhead_per_fetch_seconds = 0;
  double tokens_per_second() const { return seconds > 0 ? 1 / seconds : 0; }
};

// One drive set's part of the timed tokens' expert reads: the bytes it read and its rated rate (its
// striped members' summed, as they read at once; 0: drive none, unthrottled, no floor). One set: the
// drive every GPU shares; with --drive-per-gpu, one per GPU, its own layers' expert bytes.
struct ChainReads {
  uint64_t bytes = 0;
  double bytes_per_s = 0;
};

// tokens: the timed tokens; reads: the drive sets' parts of t.expert_bytes (they must sum to it), whose
// times add (one set after another); bytes_bound_seconds: the cell's bytes floor per token
// (served_bound_seconds). The stall is on the GPU's clock and the wall on the host's: a stall a little
// above the wall (the timing window's edges) leaves nothing outside, never less.
inline ChainBound chain_bound(const ChainTimes& t, uint32_t tokens, std::span<const ChainReads> reads, double bytes_bound_seconds) {
  if (tokens == 0) throw std::invalid_argument("chain_bound: no tokens");
  if (t.wall_seconds < 0 || t.stall_seconds < 0 || t.read_seconds < 0 || t.after_reads_seconds < 0 || bytes_bound_seconds < 0)
    throw std::invalid_argument("chain_bound: a negative time or rate");
  if (t.read_seconds > t.stall_seconds + 1e-9) throw std::invalid_argument("chain_bound: the reads' part of the stall exceeds the stall");
  uint64_t bytes = 0;
  double read_s = 0;  // over the timed tokens
  for (const ChainReads& r : reads) {
    if (r.bytes_per_s < 0) throw std::invalid_argument("chain_bound: a negative time or rate");
    bytes += r.bytes;
    if (r.bytes_per_s > 0) read_s += double(r.bytes) / r.bytes_per_s;
  }
  if (bytes != t.expert_bytes)
    throw std::invalid_argument("chain_bound: the drives' parts sum to " + std::to_string(bytes) + " expert bytes, the fetches read " +
                                std::to_string(t.expert_bytes));
  ChainBound b;
  b.stall_seconds = t.stall_seconds / tokens;
  b.read_seconds = t.read_seconds / tokens;
  b.outside_seconds = std::max(0.0, t.wall_seconds - t.stall_seconds) / tokens;
  b.after_reads_seconds = std::min(t.after_reads_seconds / tokens, b.outside_seconds);
  b.read_floor_seconds = read_s / tokens;
  b.fetches = double(t.fetches) / tokens;
  b.overhead_per_fetch_seconds = t.fetches ? (b.stall_seconds - b.read_floor_seconds) * tokens / double(t.fetches) : 0;
  b.seconds = std::max(bytes_bound_seconds, b.outside_seconds + b.read_floor_seconds);
  return b;
}

// One drive set (every GPU's fetches through the same drives) of drives_bytes_per_s.
inline ChainBound chain_bound(const ChainTimes& t, uint32_t tokens, double drives_bytes_per_s, double bytes_bound_seconds) {
  const ChainReads one{t.expert_bytes, drives_bytes_per_s};
  return chain_bound(t, tokens, std::span<const ChainReads>(&one, 1), bytes_bound_seconds);
}

}  // namespace gpunvme::bench
