#include "examples/llm/engine/nccl_comm.h"

#include <stdexcept>
#include <string>

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
}

NcclComms::~NcclComms() {
  if (aborted_) return;  // abort() freed them
  for (ncclComm_t c : comms_)
    if (c) ncclCommDestroy(c);
}

void NcclComms::recv(int rank, float* x, size_t n, int from, cudaStream_t s) {
  check(rank);
  check_nccl(ncclRecv(x, n, ncclFloat32, from, comms_.at(rank), s),
             "GPU " + std::to_string(rank) + ": NCCL receive of the hidden state from GPU " + std::to_string(from));
}

void NcclComms::send(int rank, const float* x, size_t n, int to, cudaStream_t s) {
  check(rank);
  check_nccl(ncclSend(x, n, ncclFloat32, to, comms_.at(rank), s),
             "GPU " + std::to_string(rank) + ": NCCL send of the hidden state to GPU " + std::to_string(to));
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
  // The handles stay (other threads may read them); check() refuses their use from now on.
  for (ncclComm_t c : comms_)
    if (c) ncclCommAbort(c);
}

}  // namespace gpunvme::llm
