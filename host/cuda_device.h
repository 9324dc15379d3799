// Whether this process can use a CUDA GPU, asked in every build (false without CUDA). A leaf header
// for code that only needs this answer: the streamer, the fetchers, the C API, the examples, the GPU
// suites. Checking a CUDA call's result is device/cuda_check.h (CUDA builds only).
#pragma once
#include <string>

namespace gpunvme::host {

// True when the CUDA runtime sees a usable GPU; otherwise false and, if `why` is given, the reason
// (the CUDA error, no GPU present, or a build without CUDA).
bool cuda_device_available(std::string* why = nullptr);

}  // namespace gpunvme::host
