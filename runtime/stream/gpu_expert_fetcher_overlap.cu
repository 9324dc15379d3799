// GpuExpertFetcher's overlapped fetch (gpu_expert_fetcher.h): the place and pump kernels on the
// fetcher's own stream, and the consumer's stream waiting part by part on the readiness words.
#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "device/cuda_check.h"
#include "host/error.h"
#include "runtime/stream/gpu_expert_fetcher.h"
#include "runtime/stream/gpu_fetcher_state.h"

namespace gpunvme::stream {

using device::check_cuda;

// The overlapped fetch's own stream (highest priority: its pump warps start before the consumer's
// expert kernels fill the GPU) and the driver's stream wait on a memory word, looked up once: where
// the driver lacks it, can_overlap() says so and fetch_overlapped() refuses.
void GpuExpertFetcher::open_overlap() {
  stream_ = make_priority_stream("GPU expert fetcher: its stream");
  routed_ = make_event("cudaEventCreate(expert fetcher)");
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess)
    wait_value_ = fn;
  cudaGetLastError();  // a failed lookup is an answer, not an error for the next call to find
}

void GpuExpertFetcher::fetch_overlapped(uint32_t layer, const uint32_t* device_ids, uint32_t n_ids,
                                        cuda_stream_t consumer) {
  if (!can_overlap())
    throw Error(ErrorKind::kUnsupported, "GPU expert fetcher: the CUDA driver has no cuStreamWaitValue32, which an "
                                         "overlapped fetch needs; use fetch() (the reads end before the consumer runs)");
  check_request(layer, n_ids);
  // After the consumer's work so far: its routing, and its kernels of the previous fetch, which read
  // the result tables and scratchpad slots that this fetch may now reuse.
  check_cuda(cudaEventRecord(routed_.get(), consumer), "GPU expert fetcher: routing event");
  check_cuda(cudaStreamWaitEvent(stream_.get(), routed_.get(), 0), "GPU expert fetcher: waiting for the routing");
  launch_demand(layer, device_ids, n_ids, stream_.get());
}

uint32_t GpuExpertFetcher::part_slices(model::Projection proj) const {
  if (uint32_t(proj) >= kProjectionWords) return 1;
  return slices_[size_t(last_layer_) * kProjectionWords + uint32_t(proj)];
}

void GpuExpertFetcher::wait_part(uint32_t k, model::Projection proj, cuda_stream_t consumer) {
  const uint32_t n = part_slices(proj);
  for (uint32_t x = 0; x < n; ++x) wait_slice(k, proj, x, consumer);
}

void GpuExpertFetcher::wait_slice(uint32_t k, model::Projection proj, uint32_t slice, cuda_stream_t consumer) {
  if (!can_overlap()) throw Error(ErrorKind::kUnsupported, "GPU expert fetcher: wait_part() needs an overlapped fetch");
  if (k >= last_ids_ || uint32_t(proj) >= kProjectionWords || slice >= kMaxPartSlices)
    throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: wait_part(" + std::to_string(k) + ", " +
                                                 std::to_string(uint32_t(proj)) + ", slice " + std::to_string(slice) +
                                                 ") names no part of the last fetch (" + std::to_string(last_ids_) +
                                                 " routing ids, " + std::to_string(kMaxPartSlices) + " slices at most)");
  using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  const auto wait = reinterpret_cast<WaitValue32>(wait_value_);
  const uint32_t* word = part_ready_ + ready_word(k, uint32_t(proj), slice);
  // The front end waits, no SM spins: bounded, as every read ends (the pump's timeout fails the rest).
  const CUresult r = wait(reinterpret_cast<CUstream>(consumer), reinterpret_cast<CUdeviceptr>(word), demand_token_,
                          CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS)
    throw Error(ErrorKind::kIo, "GPU expert fetcher: cuStreamWaitValue32 failed (CUresult " + std::to_string(int(r)) + ")");
}

}  // namespace gpunvme::stream
