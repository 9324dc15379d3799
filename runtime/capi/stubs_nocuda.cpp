// Builds without CUDA: the GPU path's CUDA pieces refuse. The C calls never get here (they check
// gpu_unavailable() first); these keep the link whole and say why if they ever are reached.
#include "runtime/capi/capi_internal.h"

namespace gpunvme::capi {
namespace {
[[noreturn]] void no_cuda() {
  throw Error(ErrorKind::kUnsupported, "gpunvme was built without CUDA (meson option -Dcuda=enabled needs nvcc)");
}
}  // namespace

std::unique_ptr<stream::Submitter> make_gpu_submitter(host::Controller&, std::vector<host::QueuePair*>, uint32_t) {
  no_cuda();
}

std::unique_ptr<FetcherImpl> make_gpu_fetcher(host::Controller&, stream::Submitter&, stream::ExpertCatalog,
                                              const stream::FetcherOptions&) {
  no_cuda();
}

}  // namespace gpunvme::capi
