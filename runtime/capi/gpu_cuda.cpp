// The GPU path's CUDA pieces (CUDA builds): the GPU submitter over a queue set and the GPU expert
// fetcher behind FetcherImpl.
#include <cuda_runtime_api.h>

#include <type_traits>

#include "runtime/capi/capi_internal.h"
#include "runtime/stream/gpu_expert_fetcher.h"
#include "runtime/stream/gpu_submitter.h"

namespace gpunvme::capi {

static_assert(std::is_same_v<gpunvme_cuda_stream_t, cudaStream_t>);

namespace {

class GpuFetcher final : public FetcherImpl {
 public:
  GpuFetcher(host::Controller& c, stream::GpuSubmitter& sub, stream::ExpertCatalog cat, const stream::FetcherOptions& o)
      : g_(c, sub, std::move(cat), o) {}

  void fetch_on(uint32_t layer, const uint32_t* device_ids, uint32_t n, gpunvme_cuda_stream_t stream) override {
    undescribed_ = "the latest gpunvme_fetcher_fetch_on was not waited for; call gpunvme_fetcher_wait_gpu first";
    result_.clear();
    g_.fetch(layer, device_ids, n, stream);
  }
  uint32_t wait_gpu() override {
    undescribed_ = "the latest fetch_on failed (see gpunvme_fetcher_wait_gpu's error); nothing of it is described";
    result_.clear();
    result_ = g_.wait();
    undescribed_ = nullptr;
    return uint32_t(result_.size());
  }
  GpuFetchPointers device_pointers() const override {
    return {g_.device_result(), g_.device_experts(), g_.device_selection()};
  }
  const host::DmaBuffer& scratchpad() const override { return g_.scratchpad(); }
  stream::FetcherMetrics metrics() const override { return g_.metrics(); }
  uint32_t cache_capacity() const override { return g_.cache_capacity(); }
  std::vector<uint32_t> resident_per_layer() const override { return g_.resident_per_layer(); }

 private:
  const std::vector<stream::FetchedExpert>& latest() const override { return result_; }
  stream::GpuExpertFetcher g_;
  std::vector<stream::FetchedExpert> result_;  // of the latest fetch_on, once wait_gpu returned
};

}  // namespace

std::unique_ptr<stream::Submitter> make_gpu_submitter(host::Controller& c, std::vector<host::QueuePair*> queues,
                                                      uint32_t nsid) {
  return std::make_unique<stream::GpuSubmitter>(c, std::move(queues), nsid);
}

std::unique_ptr<FetcherImpl> make_gpu_fetcher(host::Controller& c, stream::Submitter& gpu_submitter,
                                              stream::ExpertCatalog cat, const stream::FetcherOptions& o) {
  return std::make_unique<GpuFetcher>(c, static_cast<stream::GpuSubmitter&>(gpu_submitter), std::move(cat), o);
}

}  // namespace gpunvme::capi
