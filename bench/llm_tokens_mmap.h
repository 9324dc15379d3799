// The ntransformer-style loader as the engine's NVMe tier (bench/llm_tokens' `mmap` mode): the
// namespace image is mmap'ed (a striped set's member images each, read through the set's layout as
// an md RAID-0 array would be: model/stripe.h); one worker thread memcpy's each streamed layer's bytes from the mapping
// into one of two pinned staging buffers (paced like the modeled drive, pacing.h, when given); the
// engine's thread copies a filled buffer to one of two GPU buffers (cudaMemcpyAsync on a copy stream),
// waits for that copy, hands the staging buffer back, and the compute stream waits for the copy.
//
// Page residency (MmapResidency): the image lives in tmpfs, so once a page is mapped it stays mapped,
// and from the second token on the worker copies from a fully mapped file: no page faults at all.
// That is the case of a model that fits in the page cache. The case this loader exists for is the
// other one: a model bigger than RAM, whose pages the kernel reclaims behind the reader, so every
// token faults every streamed page in again. kEvicted models that: once a layer is copied, a reclaim
// thread (standing in for kswapd, off the worker's path) drops that layer's pages from the mapping
// (MADV_DONTNEED: the PTEs only; a shared mapping of the file keeps its bytes), and the next token's
// copy faults them in again. It charges the worker the fault path of a page already in the page
// cache (fault-around included), not the readahead and page-cache insertion a real miss also costs:
// still a floor on the loader's real CPU, and the drive's time is paced separately either way.
#pragma once
#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/baselines/pacing.h"
#include "examples/llm/engine/executor.h"

namespace gpunvme::bench {

enum class MmapResidency {
  kMapped,   // pages stay mapped across tokens (the model fits in the page cache)
  kEvicted,  // each layer's pages are dropped once copied (the model does not fit in RAM)
};

class MmapLayerSource final : public llm::LayerSource {
 public:
  // layers: each layer's dense part (model-file pieces, packed as the GPU holds them), in order; the image holds the namespace, so file byte
  // b of the model is at image offset m.device_byte(b) (a striped set: at that byte of the set's logical
  // volume, images[i] holding member i). pacer may be null (unthrottled); with a set it models one
  // drive per member, and the worker asks every member for its next 1 MiB at once (as the readahead of
  // an md array would) before it waits.
  MmapLayerSource(const std::vector<std::string>& images, const llm::ModelOnDevice& m, std::vector<llm::PackedRanges> layers,
                  std::shared_ptr<ls::Pacer> pacer, MmapResidency residency = MmapResidency::kMapped);
  ~MmapLayerSource() override;
  MmapLayerSource(const MmapLayerSource&) = delete;
  MmapLayerSource& operator=(const MmapLayerSource&) = delete;

  llm::WeightView acquire(llm::gpu_stream_t compute) override;
  void release(llm::gpu_stream_t compute) override;
  void sync() override;
  // Page faults the worker took while copying (its thread's minor + major faults), since construction:
  // none after the first pass with kMapped; about one per fault-around window of every streamed byte
  // with kEvicted.
  uint64_t page_faults() const { return faults_.load(std::memory_order_relaxed); }

 private:
  void worker();
  void reclaimer();
  void fill(uint64_t n, uint8_t* dst);
  // Copies logical bytes [at, at + len) into dst from the member mappings, asking the pacer for each
  // member's share; returns the latest due time (ns).
  int64_t copy(uint64_t at, uint64_t len, uint8_t* dst);
  struct Map {
    const uint8_t* p = nullptr;
    uint64_t bytes = 0;
  };
  // Bytes [begin, end) of member `member`'s mapping that a layer's copy touched.
  struct Touched {
    uint32_t member = 0;
    uint64_t begin = ~0ull, end = 0;
  };
  std::vector<Map> maps_;                         // one per member image
  MmapResidency residency_;
  std::vector<Touched> touched_;                  // the layer being filled, per member (kEvicted)
  std::vector<Touched> reclaim_;                  // copied layers' pages, for the reclaim thread
  std::optional<model::StripeGeometry> stripe_;  // a striped set's layout
  std::vector<std::vector<uint64_t>> at_;  // [layer][piece]: the image offset where the piece starts
  std::vector<llm::PackedRanges> layers_;
  std::shared_ptr<ls::Pacer> pacer_;
  uint64_t slot_ = 0;
  uint8_t* staging_[2] = {nullptr, nullptr};  // pinned
  uint8_t* device_[2] = {nullptr, nullptr};
  cudaEvent_t copied_[2] = {nullptr, nullptr}, free_[2] = {nullptr, nullptr};
  cudaStream_t copy_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t filled_[2] = {-1, -1};  // layer number (0, 1, 2, ... across tokens) in staging b, -1 free
  bool stop_ = false;
  std::exception_ptr error_;
  uint64_t consumed_ = 0;
  std::thread thread_;
  std::thread reclaim_thread_;  // kEvicted only
  std::atomic<uint64_t> faults_{0};
};

}  // namespace gpunvme::bench
