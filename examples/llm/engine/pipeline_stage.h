// One GPU's share of a model split over several GPUs (multi_gpu_executor.h): the GPU executor runs only
// the layers of its range and, at the range's ends, takes the hidden state from the previous GPU or
// hands it to the next one through a HiddenLink instead of embedding tokens or computing the head.
// The single-GPU executor is the stage: one forward pass, one tier machinery, one place.
#pragma once
#include <cstddef>
#include <cstdint>

#include "examples/llm/compute/gpu_forward.h"
#include "examples/llm/engine/layer_split.h"

namespace gpunvme::llm {

// How the hidden state (n tokens x n_embd floats, in GPU memory) crosses between neighbouring GPUs.
// receive and send only enqueue on the stage's compute stream; wait_sent waits, bounded, for the
// stream to pass the send (the stage's checks after a pass read what its kernels wrote).
class HiddenLink {
 public:
  virtual ~HiddenLink() = default;
  virtual void receive(float* x, size_t floats, gpu_stream_t s) = 0;   // from the previous GPU
  virtual void send(const float* x, size_t floats, gpu_stream_t s) = 0;  // to the next GPU
  virtual void wait_sent(gpu_stream_t s) = 0;  // throws naming the GPUs when it does not end in time
};

struct PipelineStage {
  LayerRange layers;       // this GPU's: embeddings when it starts at 0, the head when it ends at n_layer
  uint32_t first_qid = 2;  // its NVMe queues from here (each GPU its own on a shared controller)
  HiddenLink* link = nullptr;  // required unless the range is the whole model; outlives the executor
  uint64_t slot_host_bytes = 0;  // host memory its streaming slots may pin (stream_slots.h's host_share)
};

}  // namespace gpunvme::llm
