// A device copy of a host vector for the GPU kernels' tests (test_llm_matmul.cpp, test_llm_gemm.cpp):
// allocated and filled at construction (one byte more, so an empty vector still gets a pointer), read
// back after the device is idle, freed at the end of scope.
#pragma once
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime.h>

#include <vector>

namespace gpunvme::test {

template <class T>
struct DeviceArray {
  T* p = nullptr;
  explicit DeviceArray(const std::vector<T>& v) {
    REQUIRE(cudaMalloc(&p, v.size() * sizeof(T) + 1) == cudaSuccess);
    REQUIRE(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~DeviceArray() { cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::vector<T> get(size_t n) const {
    std::vector<T> v(n);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
};

}  // namespace gpunvme::test
