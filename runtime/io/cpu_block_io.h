// The one model::BlockIo over CPU-initiated I/O (host::CpuIo): whole-block reads and writes through
// a bounce buffer in DMA memory, so callers pass ordinary memory. deploy/verify/ls, the examples,
// the benchmarks and the C API all read model headers and records through it.
#pragma once
#include <cstdint>
#include <string>

#include "host/controller.h"
#include "host/cpu_io.h"
#include "host/queue_pair.h"
#include "runtime/model/block_io.h"

namespace gpunvme::model {

constexpr uint64_t kBounceBytes = 4ull << 20;  // one bounce buffer: the most one callback call moves at once

// Over an existing CpuIo of `controller`; `io` must outlive the result (the result owns the bounce buffer).
BlockIo cpu_block_io(host::Controller& controller, host::CpuIo& io, std::string name);

// Over namespace `nsid` through queue pair `qp`, with a CpuIo of its own (default options); `controller`
// and `qp` must outlive the result.
BlockIo cpu_block_io(host::Controller& controller, host::QueuePair& qp, uint32_t nsid, std::string name);

}  // namespace gpunvme::model
