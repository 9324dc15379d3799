#include "recovery_check.h"

#include <cuda_runtime.h>

#include "device/cuda_check.h"

namespace gpunvme::test {
namespace {

__global__ void decide_kernel(const RetryCase* cases, uint32_t n, nvme::RetryPolicy policy, bool after_timeout,
                              nvme::RetryDecision* out) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = after_timeout ? nvme::decide_retry_after_timeout(cases[i].attempts, policy)
                           : nvme::decide_retry(cases[i].status, cases[i].attempts, policy);
}

}  // namespace

std::vector<nvme::RetryDecision> gpu_decide_retry(const std::vector<RetryCase>& cases, const nvme::RetryPolicy& policy,
                                                  bool after_timeout) {
  const uint32_t n = uint32_t(cases.size());
  RetryCase* d_cases = nullptr;
  nvme::RetryDecision* d_out = nullptr;
  device::check_cuda(cudaMalloc(&d_cases, sizeof(RetryCase) * n + 1), "cudaMalloc(retry cases)");
  device::check_cuda(cudaMalloc(&d_out, sizeof(nvme::RetryDecision) * n + 1), "cudaMalloc(retry decisions)");
  std::vector<nvme::RetryDecision> out(n);
  cudaError_t e = cudaMemcpy(d_cases, cases.data(), sizeof(RetryCase) * n, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) {
    decide_kernel<<<8, 128>>>(d_cases, n, policy, after_timeout, d_out);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpy(out.data(), d_out, sizeof(nvme::RetryDecision) * n, cudaMemcpyDeviceToHost);
  cudaFree(d_cases);
  cudaFree(d_out);
  device::check_cuda(e, "retry decisions on the GPU");
  return out;
}

}  // namespace gpunvme::test
