#include "examples/llm/engine/nccl_comm.h"

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "device/cuda_check.h"
#include "examples/llm/engine/nccl_env.h"

namespace gpunvme::llm {
namespace {

void check_nccl(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess && r != ncclInProgress)
    throw std::runtime_error(what + ": " + ncclGetErrorString(r) + " (NCCL_DEBUG=WARN says more)");
}

}  // namespace

NcclComms::NcclComms(std::span<const int> devices) : comms_(devices.size(), nullptr) {
  disable_nvls();  // before any communicator exists: NCCL reads it at init
  check_nccl(ncclCommInitAll(comms_.data(), int(devices.size()), devices.data()),
             "NCCL communicators over " + std::to_string(devices.size()) + " GPUs");
  connect_neighbours(devices);  // aborts (frees) the communicators if it fails: no destructor runs then
}

void NcclComms::connect_neighbours(std::span<const int> devices) {
  if (devices.size() < 2) return;
  int current = 0;
  cudaGetDevice(&current);  // made current again at the end
  struct Side {
    float* buf = nullptr;
    cudaStream_t s = nullptr;
  };
  std::vector<Side> side(devices.size());
  const auto release = [&] {
    for (size_t r = 0; r < side.size(); ++r) {
      cudaSetDevice(devices[r]);
      if (side[r].s) cudaStreamDestroy(side[r].s);
      if (side[r].buf) cudaFree(side[r].buf);
    }
    cudaSetDevice(current);
  };
  try {
    for (size_t r = 0; r < side.size(); ++r) {
      const std::string gpu = "GPU " + std::to_string(devices[r]);
      device::check_cuda(cudaSetDevice(devices[r]), (gpu + ": cudaSetDevice").c_str());
      device::check_cuda(cudaMalloc(reinterpret_cast<void**>(&side[r].buf), 2 * sizeof(float)), (gpu + ": cudaMalloc").c_str());
      device::check_cuda(cudaStreamCreateWithFlags(&side[r].s, cudaStreamNonBlocking), (gpu + ": cudaStreamCreate").c_str());
    }
    check_nccl(ncclGroupStart(), "NCCL group");
    ncclResult_t r = ncclSuccess;
    for (size_t k = 0; k + 1 < side.size() && (r == ncclSuccess || r == ncclInProgress); ++k) {
      r = ncclSend(side[k].buf, 1, ncclFloat32, int(k + 1), comms_[k], side[k].s);
      if (r == ncclSuccess || r == ncclInProgress) r = ncclRecv(side[k + 1].buf + 1, 1, ncclFloat32, int(k), comms_[k + 1], side[k + 1].s);
    }
    const ncclResult_t end = ncclGroupEnd();
    check_nccl(r, "NCCL first send/recv between neighbouring GPUs");
    check_nccl(end, "NCCL first send/recv between neighbouring GPUs");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (size_t k = 0; k < side.size();) {
      device::check_cuda(cudaSetDevice(devices[k]), "cudaSetDevice");
      const cudaError_t e = cudaStreamQuery(side[k].s);
      if (e == cudaSuccess) {
        ++k;
        continue;
      }
      if (e != cudaErrorNotReady) device::check_cuda(e, ("GPU " + std::to_string(devices[k]) + ": NCCL first send/recv").c_str());
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("GPU " + std::to_string(devices[k]) + ": the NCCL connection to its neighbours did not complete within 60 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } catch (...) {
    abort();  // first: a send/recv still running ends, so that the frees below do not wait for it
    release();
    throw;
  }
  release();
}

NcclComms::~NcclComms() {
  if (aborted_) return;  // abort() freed them
  for (ncclComm_t c : comms_)
    if (c) ncclCommDestroy(c);
}

void NcclComms::recv(int rank, float* x, size_t n, int from, cudaStream_t s) {
  enqueue(rank, [&](ncclComm_t c) { return ncclRecv(x, n, ncclFloat32, from, c, s); },
          "GPU " + std::to_string(rank) + ": NCCL receive of the hidden state from GPU " + std::to_string(from));
}

void NcclComms::send(int rank, const float* x, size_t n, int to, cudaStream_t s) {
  enqueue(rank, [&](ncclComm_t c) { return ncclSend(x, n, ncclFloat32, to, c, s); },
          "GPU " + std::to_string(rank) + ": NCCL send of the hidden state to GPU " + std::to_string(to));
}

void NcclComms::enqueue(int rank, const std::function<ncclResult_t(ncclComm_t)>& op, const std::string& what) {
  check(rank);
  // Counted before the flag is read again (both sequentially consistent): either abort() sees this
  // thread and waits for it, or this thread sees the abort and enqueues nothing. Not under mu_: a
  // first send and its recv set up their connection together, each on its own thread.
  ++enqueuing_;
  struct Leave {
    std::atomic<int>& n;
    ~Leave() { --n; }
  } leave{enqueuing_};
  if (aborted_) throw std::runtime_error("GPU " + std::to_string(rank) + ": the NCCL communicators were aborted after an earlier failure");
  check_nccl(op(comms_.at(rank)), what);
}

void NcclComms::check(int rank) {
  ncclResult_t async = ncclSuccess, query = ncclSuccess;
  {
    std::lock_guard l(mu_);  // not while abort() frees the communicators: a sending GPU polls this
    if (aborted_) throw std::runtime_error("GPU " + std::to_string(rank) + ": the NCCL communicators were aborted after an earlier failure");
    query = ncclCommGetAsyncError(comms_.at(rank), &async);
  }
  check_nccl(query, "GPU " + std::to_string(rank) + ": NCCL error query");
  check_nccl(async, "GPU " + std::to_string(rank) + ": NCCL communicator");
}

void NcclComms::abort() {
  std::lock_guard l(mu_);
  if (aborted_.exchange(true)) return;
  // An enqueue returns at once (its kernel is what waits); one still setting up a connection to a
  // peer that failed is given a bounded time, then the abort goes ahead (its kernels must end).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (enqueuing_ > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The handles stay (other threads may read them); check() refuses their use from now on.
  for (ncclComm_t c : comms_)
    if (c) ncclCommAbort(c);
}

}  // namespace gpunvme::llm
