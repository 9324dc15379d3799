// The C API header and every C++ runtime header in one C++ translation unit (built with or
// without CUDA): they must compile together, and the C API's types stay what C code sees.
#include "runtime_headers.inc"

#include <type_traits>

static_assert(sizeof(gpunvme_extent_t) == 32);
static_assert(std::is_same_v<gpunvme::stream::cuda_stream_t, gpunvme_cuda_stream_t>,
              "the C API and the runtime name the same CUDA stream type");

int main() { return gpunvme_strerror(GPUNVME_OK) != nullptr ? 0 : 1; }
