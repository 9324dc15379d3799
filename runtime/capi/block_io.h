// model::BlockIo over a C API queue (the caller holds the queue for as long as it uses the BlockIo).
#pragma once
#include "runtime/capi/capi_internal.h"
#include "runtime/model/block_io.h"

namespace gpunvme::capi {

model::BlockIo block_io(gpunvme_queue* q, uint32_t nsid);

}  // namespace gpunvme::capi
