// The GPU expert fetcher's pump (gpu_expert_fetcher.h, step 2 of a fetch): one warp per queue issues
// the reads the place kernel wrote, in the order consumers read them, and publishes each expert's and
// each part's readiness as its last read ends; and the clocks behind PrefetchMetrics' stall and tail.
#include <cuda_runtime.h>

#include "runtime/stream/gpu_fetcher_kernels.h"
#include "runtime/stream/gpu_fetcher_state.h"
#include "runtime/stream/gpu_ticket_pump.cuh"

namespace gpunvme::stream {

namespace {

// A read of the fetch ended (success or final error): the last read of a slice of its projection sets
// that slice's readiness word of every routing id naming its expert, the last of its expert the
// expert's `ready` word (unless a read of it failed).
__device__ void read_ended(const FetchTable& t, const FetchCmd& c, nvme::Status st, uint32_t token) {
  GpuFetchedExpert& e = t.experts[c.sel];
  if (!st.ok()) atomicCAS(&e.failed, 0u, uint32_t(st.field) | 0x10000u);
  uint32_t done_slices = 0;  // bit x: slice x of the part has no read left
  for (uint32_t x = c.slice_first; x <= c.slice_last; ++x)
    if (atomicSub(&t.part_remaining[c.sel * kReadyWordsPerId + ready_word(0, c.proj, x)], 1u) == 1u) done_slices |= 1u << x;
  const bool expert_done = atomicSub(&t.remaining[c.sel], 1u) == 1u;
  if (done_slices == 0 && !expert_done) return;
  __threadfence_system();  // the bytes and the failed flag before a word that says they are there
  for (uint32_t k = 0; done_slices != 0 && k < t.n_ids; ++k)
    if (t.selection[k] == c.sel)
      for (uint32_t x = c.slice_first; x <= c.slice_last; ++x)
        if (done_slices & (1u << x)) *const_cast<volatile uint32_t*>(&t.part_ready[ready_word(k, c.proj, x)]) = token;
  if (expert_done && *const_cast<volatile uint32_t*>(&e.failed) == 0) *const_cast<volatile uint32_t*>(&e.ready) = token;
}

// The demand pump's extra warp (concurrent prefetches): each pending hit waits for the prefetch's reads
// of its expert to end, then takes their outcome and publishes the expert's words. Bounded: every
// prefetch read ends (the pump's timeout fails the ones that do not), and no later prefetch reuses
// the prefetch's table before this pump is done (it waits for it: GpuExpertFetcher::launch).
__device__ void publish_pending_hits(FetchTable& t, const FetchTable& p) {
  if ((threadIdx.x & 31u) != 0) return;
  const uint32_t token = t.result->token, ptoken = p.result->token;
  for (uint32_t d = 0; d < t.result->count; ++d) {
    GpuFetchedExpert& e = t.experts[d];
    if (e.pending == 0) continue;
    const GpuFetchedExpert& pe = p.experts[e.pending - 1];
    uint32_t failed = 0;
    for (;;) {
      failed = *const_cast<const volatile uint32_t*>(&pe.failed);
      if (failed || *const_cast<const volatile uint32_t*>(&pe.ready) == ptoken) break;
      __nanosleep(2000);
    }
    *const_cast<volatile uint32_t*>(&e.failed) = failed;
    __threadfence_system();  // the slot's bytes (the prefetch's reads) and `failed` before the words
    for (uint32_t k = 0; k < t.n_ids; ++k)
      if (t.selection[k] == d)
        for (uint32_t w = 0; w < kReadyWordsPerId; ++w) *const_cast<volatile uint32_t*>(&t.part_ready[k * kReadyWordsPerId + w]) = token;
    if (!failed) *const_cast<volatile uint32_t*>(&e.ready) = token;
  }
}

// A concurrent prefetch's warp, before its first read: waits until the demand fetch placed before it
// (token `demand`) has at most gate_reads reads not ended: its last round, one read per queue. Then
// the prefetch's reads queue behind the demand's at the drive: they neither delay the demand (the
// consumer waits for it) nor leave the drive idle after it (a round of reads is more than the drive's
// bandwidth-delay product). Gating once the demand had all its reads issued (a whole window left)
// shared the drive with the demand's last 8 MB: measured on Qwen3-30B-A3B at pcie5, 89-90 % against
// 90-91 % with one read per queue (docs/performance.md, session 13). Bounded: the demand's reads all
// end; a later demand fetch (another token) releases it too.
__device__ void queue_behind_demand(const GpuFetcherState& s, uint32_t demand) {
  if ((threadIdx.x & 31u) == 0) {
    const FetchTable& d = s.table[kDemand];
    for (;;) {
      if (*const_cast<const volatile uint32_t*>(&d.result->token) != demand) break;
      const uint32_t n = *const_cast<const volatile uint32_t*>(&d.result->count);
      uint32_t left = 0;
      for (uint32_t i = 0; i < n && i < s.max_experts; ++i) left += *const_cast<const volatile uint32_t*>(&d.remaining[i]);
      if (left <= s.gate_reads) break;
      __nanosleep(1000);
    }
  }
  __syncwarp();
}

// One warp per queue: the reads placed above, each ending in read_ended(); at most `depth` in flight
// per queue (0: the launch's depth). Queue w takes reads w, w + queues, ...: with a small depth the
// queues move through the list side by side, so the reads end roughly in the list's order. On a
// striped set each member's pump (its controller's queues, its own stream) takes its member's list
// only; all of them count down the same per-expert and per-part words (read_ended's atomics).
__global__ void pump_fetch(TicketLaunch launch, GpuFetcherState* S, uint32_t which, uint32_t member,
                           device::DeviceBuffer dst, uint32_t depth) {
  if (depth != 0 && (launch.depth == 0 || depth < launch.depth)) launch.depth = depth;  // launch: 0 = the ring's
  const uint32_t w = blockIdx.x;
  if (w >= launch.queue_count) {  // the extra warp of a demand fetch beside a concurrent prefetch
    FetchTable& d = S->table[kDemand];
    if (w == launch.queue_count && which == kDemand && d.pending_from < kTables) publish_pending_hits(d, S->table[d.pending_from]);
    return;
  }
  const FetchTable* t = &S->table[which];
  if (which != kDemand && t->behind_token != 0) queue_behind_demand(*S, t->behind_token);
  const uint32_t count = *const_cast<volatile uint32_t*>(&t->member_cmds[member]);
  const uint32_t token = t->result->token;
  FetchCmd* cmds = t->cmds + size_t(member) * S->max_commands;
  const device::DeviceQueue qc = launch.queues[w];
  pump_ticket(
      launch, w, count,
      [&](uint64_t g, uint16_t cid) {
        const FetchCmd c = cmds[g];
        // A read of an expert cut_wrong_prefetch dropped: one block, so the command still ends (and
        // counts) in the ticket while the drive moves almost nothing for it. The command itself shrinks,
        // so a re-issue (retry, reset) neither reads the rest nor counts the bytes spared twice.
        const bool cut = which != kDemand && (*const_cast<const volatile uint32_t*>(&t->experts[c.sel].failed) & kCutRead);
        if (cut && c.blocks > 1) {
          cmds[g].blocks = 1;
          atomicAdd(&S->metrics.prefetch_cut_bytes, static_cast<unsigned long long>(c.blocks - 1) << qc.lba_shift);
        }
        const uint32_t blocks = cut ? 1u : c.blocks;
        nvme::PrpPair p;
        device::prps_for(qc, cid, dst, c.dst, uint64_t(blocks) << qc.lba_shift, &p);
        return nvme::make_read(qc.nsid, c.lba, blocks, p.prp1, p.prp2);
      },
      [&](uint64_t g, nvme::Status st) { read_ended(*t, cmds[g], st, token); });
}

// Stall of a demand fetch on its stream: from the kernel before it (routing done) to its reads done.
__global__ void stall_begin(GpuFetcherState* S) { S->stall_t0 = device::global_timer_ns(); }
__global__ void stall_end(GpuFetcherState* S, uint32_t layer) {
  const unsigned long long now = device::global_timer_ns();
  S->reads_end = now;
  S->reads_end_token = S->table[kDemand].result->token;
  S->stall_ns[layer] += now - S->stall_t0;
  if (S->reads_t0 >= S->stall_t0) S->read_ns[layer] += now - S->reads_t0;  // not after a failed placement
}

// The consumer's kernels of demand fetch `token` are done: the time since its reads ended. The
// consumer's stream waits for the readiness words, not for stall_end on the fetcher's stream, so its
// kernels may end before stall_end has run: reads_end is then an older fetch's (or 0 before the first,
// which once put the timer's epoch into the JSON), and the tail is nothing.
__global__ void consumed_clock(GpuFetcherState* S, uint32_t layer, uint32_t token) {
  const unsigned long long now = device::global_timer_ns(), end = *const_cast<volatile unsigned long long*>(&S->reads_end);
  if (*const_cast<volatile uint32_t*>(&S->reads_end_token) == token && now > end) S->tail_ns[layer] += now - end;
}

}  // namespace

void launch_pump_fetch(const TicketLaunch& launch, uint32_t warps, GpuFetcherState* state, uint32_t which,
                       uint32_t member, const device::DeviceBuffer& dst, uint32_t depth, cuda_stream_t stream) {
  pump_fetch<<<warps, 32, 0, stream>>>(launch, state, which, member, dst, depth);
}

void launch_stall_begin(GpuFetcherState* state, cuda_stream_t stream) { stall_begin<<<1, 1, 0, stream>>>(state); }

void launch_stall_end(GpuFetcherState* state, uint32_t layer, cuda_stream_t stream) {
  stall_end<<<1, 1, 0, stream>>>(state, layer);
}

void launch_consumed_clock(GpuFetcherState* state, uint32_t layer, uint32_t token, cuda_stream_t stream) {
  consumed_clock<<<1, 1, 0, stream>>>(state, layer, token);
}

}  // namespace gpunvme::stream
