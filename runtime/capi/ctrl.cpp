// Controller handles: bring-up, shutdown, identify data.
#include "host/open_device.h"
#include "runtime/capi/capi_internal.h"

using namespace gpunvme;
using namespace gpunvme::capi;

extern "C" {

gpunvme_err_t gpunvme_ctrl_init(gpunvme_ctrl_t** out, const char* device) {
  return guard("gpunvme_ctrl_init", [&] {
    if (out) *out = nullptr;
    GPUNVME_NEED(out);
    GPUNVME_NEED(device);
    auto c = std::make_unique<gpunvme_ctrl>();
    c->ctrl = host::open_controller(device);
    *out = c.release();
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_ctrl_shutdown(gpunvme_ctrl_t* ctrl) {
  return guard("gpunvme_ctrl_shutdown", [&] {
    if (!ctrl) return GPUNVME_OK;
    auto held = claim(ctrl, "ctrl");
    if (const uint32_t n = ctrl->queues.load(); n > 0)
      return fail(GPUNVME_ERR_INVALID_ARGUMENT, "gpunvme_ctrl_shutdown: " + std::to_string(n) +
                                                    " I/O queues are still open; gpunvme_delete_io_queue / "
                                                    "gpunvme_gpu_queues_destroy them first");
    try {
      ctrl->ctrl->shutdown();
    } catch (...) {
      destroy(ctrl, held);  // the handle goes either way; the message says how the shutdown ended
      throw;
    }
    destroy(ctrl, held);
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_ctrl_info(gpunvme_ctrl_t* ctrl, gpunvme_ctrl_info_t* out) {
  return guard("gpunvme_ctrl_info", [&] {
    host::Controller& c = *live(ctrl, "ctrl").ctrl;
    GPUNVME_NEED(out);
    *out = {};
    out->io_queues = c.io_queues_granted();
    out->max_queue_entries = c.max_queue_entries();
    out->page_bytes = c.page_bytes();
    out->max_transfer_bytes = c.max_transfer_bytes();
    out->namespaces = uint32_t(c.namespaces().size());
    return GPUNVME_OK;
  });
}

gpunvme_err_t gpunvme_ns_info(gpunvme_ctrl_t* ctrl, uint32_t nsid, uint64_t* blocks, uint32_t* lba_bytes) {
  return guard("gpunvme_ns_info", [&] {
    const auto& ns = live(ctrl, "ctrl").ctrl->namespace_info(nsid);
    if (blocks) *blocks = ns.blocks;
    if (lba_bytes) *lba_bytes = ns.lba_bytes;
    return GPUNVME_OK;
  });
}

}  // extern "C"
