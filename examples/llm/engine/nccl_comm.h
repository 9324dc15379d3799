// NCCL communicators of one process over several of its GPUs (multi_gpu_executor.h): made together,
// NVLink multicast off first (nccl_env.h), destroyed (or aborted) together. Point-to-point only: the
// hidden state from rank r to rank r + 1. Rank r is CUDA device devices[r].
#pragma once
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

namespace gpunvme::llm {

class NcclComms {
 public:
  // Made, then each neighbouring pair connected (connect_neighbours): every later send and recv only
  // enqueues.
  explicit NcclComms(std::span<const int> devices);
  ~NcclComms();
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;

  size_t size() const { return comms_.size(); }
  // Enqueue on `s` (rank's device current): floats from rank `from` into x on `rank`, or to `to`.
  void recv(int rank, float* x, size_t n, int from, cudaStream_t s);
  void send(int rank, const float* x, size_t n, int to, cudaStream_t s);
  // Throws if rank's communicator reported an asynchronous error (a peer lost, a network failure).
  void check(int rank);
  // Ends every communicator's outstanding work (its kernels return) and makes them unusable: what a
  // bounded wait does when a GPU fails or hangs. Any thread; once.
  void abort();
  bool aborted() const { return aborted_; }

 private:
  // Rank r sends rank r + 1 one float, every pair in one NCCL group from this thread, and waits for it
  // (bounded). NCCL connects a pair (and may load its kernels) at the pair's first send/recv, which waits
  // for the peer to take part: done here, a pass's send returns once enqueued, which the multi-GPU
  // executor's hand-off of each pass's recv after the matching send relies on.
  void connect_neighbours(std::span<const int> devices);
  // Runs an NCCL enqueue on rank's communicator unless abort() came first; abort() waits (bounded) for
  // those under way, so that no thread enqueues on a communicator it frees.
  void enqueue(int rank, const std::function<ncclResult_t(ncclComm_t)>& op, const std::string& what);

  std::vector<ncclComm_t> comms_;
  std::mutex mu_;  // check() against abort()
  std::atomic<bool> aborted_{false};
  std::atomic<int> enqueuing_{0};  // threads inside enqueue() past their abort check
};

}  // namespace gpunvme::llm
