// The greedy choice on the GPU: the index of the largest of n floats, as std::max_element picks it
// (the lowest index among equal largest values), so that a token guessed on the GPU is the one the
// host's greedy sampling takes from the same logits. Used to predict the next pass's first fetched
// layer before the logits reach the host (gpu_forward.cu, predict_next_pass).
#pragma once
#include <cstdint>

namespace gpunvme::llm {

using gpu_stream_t = struct CUstream_st*;

// *out = the index of the largest of v[0..n) (n >= 1), the lowest among equals; 0 when no value is
// larger than -inf (all NaN or -inf). One block, enqueued on `s`.
void gpu_argmax(gpu_stream_t s, const float* v, uint32_t n, uint32_t* out);

}  // namespace gpunvme::llm
