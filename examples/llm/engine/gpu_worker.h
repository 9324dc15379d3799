// A host thread with one GPU current, running the jobs posted to it one at a time, in order
// (multi_gpu_executor.h: a thread per GPU). Each job's result or exception comes back in its future.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace gpunvme::llm {

class GpuWorker {
 public:
  explicit GpuWorker(int device);
  ~GpuWorker();  // runs the jobs already posted, then ends the thread
  GpuWorker(const GpuWorker&) = delete;
  GpuWorker& operator=(const GpuWorker&) = delete;

  // `then`, if given, runs on the thread after the job, whether it threw or not (a waiter's wake-up).
  std::future<void> post(std::function<void()> job, std::function<void()> then = {});
  int device() const { return device_; }

 private:
  void loop();

  int device_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Job {
    std::packaged_task<void()> task;
    std::function<void()> then;
  };
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace gpunvme::llm
