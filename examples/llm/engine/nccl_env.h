// NVLink multicast (NVLS) stays off in every program that starts NCCL: the lent multi-GPU machines'
// notes require it, because multicast objects can take shared GPUs out of service. NCCL reads
// NCCL_NVLS_ENABLE when a communicator is made, so this runs before every ncclCommInit (nccl_comm.h).
// No NCCL here: it is plain environment handling, tested on machines without a GPU.
#pragma once

namespace gpunvme::llm {

inline constexpr const char* kNvlsVariable = "NCCL_NVLS_ENABLE";

// Sets NCCL_NVLS_ENABLE=0 when unset; when the user set it to anything but 0, throws std::runtime_error
// naming the fix (multicast is never turned on behind their back, nor their setting silently replaced).
void disable_nvls();

}  // namespace gpunvme::llm
