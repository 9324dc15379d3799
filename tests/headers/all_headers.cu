// Issue #11: an engine includes the host C API, the device API and the C++ runtime headers in one
// .cu file. Built with nvcc in CUDA builds; compiling is the test, and the names it checks below
// must stay distinct (the host queue handle vs the device queue) and usable from a kernel.
#include "runtime_headers.inc"

#include "device/device_queue.h"
#include "device/gpunvme_device.cuh"
#include "device/queue_set.h"
#include "device/warp_queue.cuh"
#include "runtime/stream/gpu_ticket_pump.cuh"

#include <type_traits>

static_assert(!std::is_same_v<gpunvme_device_queue_t, gpunvme_queue_t>,
              "the device queue is not the C API's host queue handle");
static_assert(std::is_same_v<gpunvme_device_queue_t, gpunvme::device::DeviceQueue>);

// The device API from a kernel, next to the C API's types (never launched).
__global__ void engine_kernel(gpunvme_device_queue_t* q, gpunvme_extent_t e, int* out) {
  if (!gpunvme_queue_acquire(q)) return;
  const int cid = gpunvme_sq_submit_read(q, e.first_lba, uint32_t(e.lba_count - 1), 0, 0);
  const gpunvme_cq_result r = gpunvme_cq_poll_completion(q, 1000);
  gpunvme_queue_release(q);
  *out = cid + int(r.success);
}

int main() { return gpunvme_strerror(GPUNVME_OK) != nullptr ? 0 : 1; }
