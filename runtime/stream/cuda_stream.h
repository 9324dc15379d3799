// The CUDA stream handle in headers that plain C++ (non-CUDA) code also includes: cudaStream_t is
// `struct CUstream_st*`, so this names the same type without pulling in the CUDA headers.
#pragma once

struct CUstream_st;

namespace gpunvme::stream {
using cuda_stream_t = CUstream_st*;
}  // namespace gpunvme::stream
