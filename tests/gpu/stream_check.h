// Kernels the GPU streaming suite enqueues on CUDA streams (behind plain host functions): consumers
// that check every byte of a slot or of fetched experts against the namespace pattern, a toy
// router that writes expert ids into GPU memory, and a ticket kernel that builds its own reads.
#pragma once
#include <cstdint>

#include "driver/compiler.h"
#include "gpu_check.h"
#include "runtime/stream/cuda_stream.h"
#include "runtime/stream/gpu_expert_fetcher.h"
#include "runtime/stream/gpu_fetch_types.h"
#include "runtime/stream/gpu_submitter.h"

namespace gpunvme::test {

// Enqueues on `s`: spin `spin_ns` first (a kernel still using the slot), then compare every byte of
// `pieces` (gpu_check.h VerifySpan, here at any alignment: unaligned tensor starts and ends) and add
// the mismatching bytes to *mismatches; *status_seen gets *status (or 0 if null).
void enqueue_verify_slot(stream::cuda_stream_t s, const uint8_t* slot, const VerifySpan* pieces, uint32_t n,
                         uint64_t seed, uint64_t spin_ns, const uint32_t* status, uint64_t* mismatches,
                         uint32_t* status_seen);

// The toy router's choice for token `token`: k ids over n_experts with repeats, at most `distinct`
// distinct ones. Same function on host and GPU.
GPUNVME_HD inline uint32_t toy_route(uint32_t token, uint32_t i, uint32_t n_experts, uint32_t distinct) {
  uint32_t h = token * 2654435761u + (i % distinct) * 40503u + 0x9E37u;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  // A hot set of experts (half the ids) and a tail, so an LRU cache sees hits and faults.
  const uint32_t hot = n_experts / 3 + 1;
  return (h & 1) ? (h >> 1) % hot : (h >> 1) % n_experts;
}
// Enqueues on `s`: ids[i] = toy_route(token, i, ...) for i < k.
void enqueue_toy_router(stream::cuda_stream_t s, uint32_t* ids, uint32_t k, uint32_t token, uint32_t n_experts,
                        uint32_t distinct);
// Enqueues on `s`: waits (<= 2 s on %globaltimer) until every fetched expert is ready, then checks
// its parts' bytes: part k of expert e of `layer` starts at namespace byte ns_offsets[(layer * n_experts
// + e) * 4 + k]. Adds mismatching bytes (and 1 per expert never ready) to *mismatches.
void enqueue_verify_experts(stream::cuda_stream_t s, const stream::GpuFetchResult* result,
                            const stream::GpuFetchedExpert* experts, const uint8_t* scratch,
                            const uint64_t* ns_offsets, uint32_t layer, uint32_t n_experts, uint64_t seed,
                            uint64_t* mismatches);
// The same for fetcher f's latest fetch (its result, experts and scratchpad).
inline void enqueue_verify_fetch(stream::cuda_stream_t s, const stream::GpuExpertFetcher& f, const uint64_t* ns_offsets,
                                 uint32_t layer, uint32_t n_experts, uint64_t seed, uint64_t* mismatches) {
  enqueue_verify_experts(s, f.device_result(), f.device_experts(), static_cast<const uint8_t*>(f.scratchpad().device()),
                         ns_offsets, layer, n_experts, seed, mismatches);
}

// Enqueues on `s` (after GpuExpertFetcher::wait_part(k, proj, s), or wait_slice for slices 0..upto):
// no waiting, the stream did it. Checks that routing id k's readiness words for `proj`, slices 0..upto,
// hold the fetch's token, then either counts the expert as failed (*failed) or checks the bytes of its
// part(s) of that projection up to the end of slice `upto` (gpu_fetch_types.h) as
// enqueue_verify_experts does. Adds mismatching bytes (1 for a word not yet set) to *mismatches.
void enqueue_verify_part(stream::cuda_stream_t s, const stream::GpuFetchResult* result,
                         const stream::GpuFetchedExpert* experts, const uint32_t* selection,
                         const uint32_t* part_ready, const uint8_t* scratch, const uint64_t* ns_offsets,
                         uint32_t layer, uint32_t n_experts, uint32_t k, uint32_t proj, uint64_t seed,
                         uint64_t* mismatches, uint64_t* failed, uint32_t upto = stream::kMaxPartSlices - 1);

// A ticket of `gpu` (GpuSubmitter::issue_kernel, gpu_ticket_pump.cuh) whose kernel builds its own
// `count` reads on the GPU, no templates: read g takes `blocks` blocks at LBA (g * blocks) modulo
// the span rounded down to whole reads, all into the first bytes of `dst` (for the null namespace,
// which moves no data). Enqueued on the legacy default stream; returns the ticket to wait() for.
uint64_t issue_generated_reads(stream::GpuSubmitter& gpu, uint64_t count, uint32_t blocks, uint64_t span_blocks,
                               const device::DeviceBuffer& dst);

}  // namespace gpunvme::test
