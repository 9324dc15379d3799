// Qualifiers that let the protocol code compile for both host and device (CUDA) code.
#pragma once

#if defined(__CUDACC__)
#define GPUNVME_HD __host__ __device__
#else
#define GPUNVME_HD
#endif

#if defined(__CUDA_ARCH__)
#define GPUNVME_ON_DEVICE 1
#else
#define GPUNVME_ON_DEVICE 0
#endif

// `#pragma unroll` in code compiled for both sides: the device compiler unrolls (so a small array indexed
// by the loop's counter stays in registers); host compilers do not know the pragma and get nothing.
#if defined(__CUDA_ARCH__)
#define GPUNVME_UNROLL _Pragma("unroll")
#else
#define GPUNVME_UNROLL
#endif
