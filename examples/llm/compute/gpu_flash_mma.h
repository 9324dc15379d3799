// Prompt attention on the tensor cores (issue 36): gpu_flash_attention.cuh's flash kernel with the two
// products, Q K^T and P V, as mma.sync m16n8k16 on FP16 inputs with FP32 sums (gpu_flash_mma.cu says
// how). Heads of 64, 128 and 256 dimensions (gpt-oss, Llama/Qwen, Gemma 3); other widths keep the FP32
// kernel of gpu_flash_attention.cuh.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace gpunvme::llm::gpu {

// Whether the tensor-core kernel takes heads of head_dim dimensions: 64, 128 or 256 (others take the
// FP32 kernel, the fallback).
bool flash_mma_takes(uint32_t head_dim);

// gpu_flash_attention.cuh's flash_attention on the tensor cores (the same arguments and layouts: q and
// out [n][heads][head_dim] FP32, the cache [position][kv_dim] FP16 from this sequence's row 0).
void flash_attention_mma(cudaStream_t s, const float* q, const __half* kc, const __half* vc, uint32_t kv_dim,
                         uint32_t head_dim, uint32_t heads, uint32_t group, uint32_t window, uint32_t pos0, uint32_t n,
                         float scale, const float* sinks, float* out);

}  // namespace gpunvme::llm::gpu
