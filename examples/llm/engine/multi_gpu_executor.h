// Several GPUs of one host (issue 35, `--gpus N`): the layers split into N contiguous ranges
// (layer_split.h), each run by a GPU executor of its own on its GPU (its resident, RAM and streamed
// layers by its own plan, its own NVMe queues on the shared controller), the embeddings on GPU 0 and
// the head on the last; the hidden state crosses from GPU i to GPU i + 1 by NCCL send/recv.
//
// One process, one host thread per GPU. Why not one thread driving every GPU: each GPU's executor
// waits on its host thread (the host-lead bound, the logits, the sent hidden state), and NCCL, when
// one thread issues for several GPUs, needs the send and the matching recv grouped into one call,
// which a per-GPU executor waiting in between would deadlock. A thread each keeps every GPU's executor
// exactly the single-GPU one (one mechanism), with its device current for all its CUDA calls.
// Every wait is bounded: a pass that has not ended in kPassTimeout, or any GPU's error, aborts the
// communicators (their kernels end), and the error names the GPU; the executor refuses passes after.
#pragma once
#include <memory>
#include <span>

#include "examples/llm/engine/executor.h"

namespace gpunvme::llm {

// Throws naming the fix where this build has no NCCL, o.gpus exceeds the GPUs CUDA sees, or a GPU
// would hold no layer.
std::unique_ptr<Executor> make_multi_gpu_executor(std::span<host::Controller* const> controllers, const ModelOnDevice& m,
                                                  uint32_t n_ctx, const GpuExecOptions& o);

}  // namespace gpunvme::llm
