#include "examples/llm/compute/gpu_graph.h"

#include <cuda_runtime.h>

#include "device/cuda_check.h"

namespace gpunvme::llm {

CapturedWork::~CapturedWork() { reset(); }

void CapturedWork::reset() {
  if (exec_) cudaGraphExecDestroy(exec_);
  exec_ = nullptr;
}

bool CapturedWork::capture(gpu_stream_t stream, const std::function<void()>& enqueue) {
  reset();
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  // Thread-local mode: another thread's CUDA calls (the I/O threads, the load checks) stay legal meanwhile.
  device::check_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "graph capture");
  cudaGraph_t graph = nullptr;
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(s, &graph);  // ends the capture whatever happened; the enqueue's error is the one to report
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  const cudaError_t e = cudaStreamEndCapture(s, &graph);
  bool ok = e == cudaSuccess && graph;
  if (ok) ok = cudaGraphInstantiate(&exec_, graph, 0) == cudaSuccess;
  if (graph) cudaGraphDestroy(graph);
  if (!ok) {
    exec_ = nullptr;
    cudaGetLastError();  // an invalidated capture's error is not sticky: clear it
  }
  return ok;
}

void CapturedWork::launch(gpu_stream_t s) {
  device::check_cuda(cudaGraphLaunch(exec_, reinterpret_cast<cudaStream_t>(s)), "graph launch");
}

}  // namespace gpunvme::llm
