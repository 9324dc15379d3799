#include "examples/llm/engine/gpu_worker.h"

#include <cuda_runtime_api.h>

#include <string>

#include "device/cuda_check.h"

namespace gpunvme::llm {

GpuWorker::GpuWorker(int device) : device_(device), thread_([this] { loop(); }) {}

GpuWorker::~GpuWorker() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

std::future<void> GpuWorker::post(std::function<void()> job, std::function<void()> then) {
  // The device is made current in the job itself: a failure to select it is that job's error.
  std::packaged_task<void()> t([this, job = std::move(job)] {
    const std::string what = "cudaSetDevice(" + std::to_string(device_) + ")";
    device::check_cuda(cudaSetDevice(device_), what.c_str());
    job();
  });
  std::future<void> f = t.get_future();
  {
    std::lock_guard l(mu_);
    jobs_.push_back({std::move(t), std::move(then)});
  }
  cv_.notify_one();
  return f;
}

void GpuWorker::loop() {
  for (;;) {
    Job j;
    {
      std::unique_lock l(mu_);
      cv_.wait(l, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      j = std::move(jobs_.front());
      jobs_.pop_front();
    }
    j.task();  // its exception, if any, goes to the future
    if (j.then) j.then();
  }
}

}  // namespace gpunvme::llm
