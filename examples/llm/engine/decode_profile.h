// GPUNVME_DECODE_EVENTS=1 (issue 36): where a one-token pass's time goes, summed over the run and
// printed per pass on stderr when the GPU executor ends: on the GPU (CUDA events) the pass's ids
// copied and embedded, the layers, the head and what follows it (the logits' copy, or the greedy
// pick); on the host, the wall time inside the executor (the GPU's time plus launch and wake-up
// latency) and the time between passes (the caller's: sampling, printing). The first two one-token
// passes are left out (the graph's warm-up and capture). CUDA builds only (gpu_executor.cpp).
#pragma once
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "device/cuda_check.h"

namespace gpunvme::llm {

class DecodeProfile {
 public:
  static std::unique_ptr<DecodeProfile> from_env() {
    const char* v = std::getenv("GPUNVME_DECODE_EVENTS");
    return v && std::string(v) == "1" ? std::make_unique<DecodeProfile>() : nullptr;
  }
  DecodeProfile() {
    for (cudaEvent_t& e : ev_) device::check_cuda(cudaEventCreate(&e), "decode profile event");
  }
  ~DecodeProfile() {
    if (n_)
      std::fprintf(stderr,
                   "decode events: %llu one-token passes, ms per pass: GPU ids+embed %.4f, layers %.4f, head+logits/pick %.4f "
                   "(GPU busy %.4f); in the executor %.4f (launch and wake-up %.4f); host between passes %.4f\n",
                   (unsigned long long)n_, ms_[0] / n_, ms_[1] / n_, ms_[2] / n_, (ms_[0] + ms_[1] + ms_[2]) / n_, wall_ms_ / n_,
                   (wall_ms_ - ms_[0] - ms_[1] - ms_[2]) / n_, gap_ms_ / n_);
    for (cudaEvent_t e : ev_) cudaEventDestroy(e);
  }
  DecodeProfile(const DecodeProfile&) = delete;
  DecodeProfile& operator=(const DecodeProfile&) = delete;

  // A one-token pass starts (before its ids are copied) / its embedding and its layers are enqueued.
  void begin(cudaStream_t s) {
    begun_ = std::chrono::steady_clock::now();
    on_ = true;
    record(0, s);
  }
  void embedded(cudaStream_t s) { record(1, s); }
  void layered(cudaStream_t s) { record(2, s); }
  cudaEvent_t end_event() const { return ev_[3]; }  // recorded by GpuForward before its wait (time_pass_end)
  // The pass's result is on the host (its end event has completed).
  void ended() {
    if (!on_) return;
    on_ = false;
    const auto now = std::chrono::steady_clock::now();
    if (++seen_ > kSkip) {
      float a = 0, b = 0, c = 0;
      device::check_cuda(cudaEventElapsedTime(&a, ev_[0], ev_[1]), "decode profile");
      device::check_cuda(cudaEventElapsedTime(&b, ev_[1], ev_[2]), "decode profile");
      device::check_cuda(cudaEventElapsedTime(&c, ev_[2], ev_[3]), "decode profile");
      ms_[0] += a, ms_[1] += b, ms_[2] += c;
      wall_ms_ += std::chrono::duration<double, std::milli>(now - begun_).count();
      if (has_last_) gap_ms_ += std::chrono::duration<double, std::milli>(begun_ - last_end_).count();
      ++n_;
    }
    last_end_ = now, has_last_ = true;
  }
  // A pass of several tokens: the next gap is not the caller's alone.
  void other_pass() { has_last_ = false, on_ = false; }

 private:
  void record(int i, cudaStream_t s) { device::check_cuda(cudaEventRecord(ev_[i], s), "decode profile event"); }
  static constexpr uint64_t kSkip = 2;
  cudaEvent_t ev_[4] = {};
  bool on_ = false, has_last_ = false;
  uint64_t seen_ = 0, n_ = 0;
  double ms_[3] = {0, 0, 0}, wall_ms_ = 0, gap_ms_ = 0;
  std::chrono::steady_clock::time_point begun_, last_end_;
};

}  // namespace gpunvme::llm
