// Work enqueued on a stream, captured once into a CUDA graph and replayed (issue 36, docs/decode-graph.md):
// a one-token pass over layers held in GPU memory is a few hundred small kernels whose launches cost
// the host more than the GPU takes to run some of them; a replay is one launch. A replay runs the same
// kernels with the same arguments on the same buffers, so whatever differs between passes (the token,
// its position and slot) must be in device memory at fixed addresses, as GpuForward keeps them.
#pragma once
#include <functional>

namespace gpunvme::llm {

using gpu_stream_t = struct CUstream_st*;

class CapturedWork {
 public:
  CapturedWork() = default;
  ~CapturedWork();
  CapturedWork(const CapturedWork&) = delete;
  CapturedWork& operator=(const CapturedWork&) = delete;

  // Captures what `enqueue` puts on `s` (nothing runs) and instantiates it. False, with nothing kept and
  // the stream as before, where the work cannot be captured (an operation a graph may not hold): the
  // caller then runs it the ordinary way.
  bool capture(gpu_stream_t s, const std::function<void()>& enqueue);
  bool ready() const { return exec_ != nullptr; }
  // Enqueues one replay on `s`.
  void launch(gpu_stream_t s);
  void reset();

 private:
  struct CUgraphExec_st* exec_ = nullptr;
};

}  // namespace gpunvme::llm
