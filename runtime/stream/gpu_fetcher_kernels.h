// Host-side launchers of the GPU expert fetcher's kernels, each on the stream given (the kernels
// stay in their files: placement in gpu_expert_place.cu, reads and clocks in gpu_expert_pump.cu).
// They only enqueue: the caller checks cudaGetLastError() and orders them (GpuExpertFetcher::launch).
#pragma once
#include <cstdint>

#include "device/device_queue.h"
#include "runtime/stream/cuda_stream.h"
#include "runtime/stream/gpu_ticket.h"

namespace gpunvme::stream {

struct GpuFetcherState;

// One warp: selection, cache placement, result and the reads of fetch table `which`.
void launch_place_experts(GpuFetcherState* state, uint32_t which, uint32_t layer, const uint32_t* ids, uint32_t n_ids,
                          cuda_stream_t stream);
// `warps` warps: one per queue of `launch` (member `member`'s reads into `dst`, at most `depth` in
// flight per queue; 0: the launch's), and for member 0's pump of a demand fetch beside concurrent
// prefetches one more (pending hits).
void launch_pump_fetch(const TicketLaunch& launch, uint32_t warps, GpuFetcherState* state, uint32_t which,
                       uint32_t member, const device::DeviceBuffer& dst, uint32_t depth, cuda_stream_t stream);
// The stall clock of a demand fetch of `layer`: begin before its placement, end after its reads.
void launch_stall_begin(GpuFetcherState* state, cuda_stream_t stream);
void launch_stall_end(GpuFetcherState* state, uint32_t layer, cuda_stream_t stream);
// The tail clock: the consumer's kernels of demand fetch `token` are done.
void launch_consumed_clock(GpuFetcherState* state, uint32_t layer, uint32_t token, cuda_stream_t stream);

}  // namespace gpunvme::stream
