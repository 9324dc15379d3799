// CUDA error checking, with no other dependency (a leaf header for code that only needs this:
// the streamer, the fetchers). Defined in queue_set.cpp; CUDA builds only. Whether a GPU is
// usable at all: host::cuda_device_available (host/cuda_device.h, also a leaf), in every build.
#pragma once

namespace gpunvme::device {

// Throws gpunvme::Error(kIo) naming `what` if a CUDA call failed (`error` is a cudaError_t).
void check_cuda(int error, const char* what);

}  // namespace gpunvme::device
