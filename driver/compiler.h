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
