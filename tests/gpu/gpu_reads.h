// Reads through the runtime's GPU path for the device suite: block ranges into a GPU-mapped buffer
// become a command plan (runtime/plan: split by the queues' per-command limit, PRPs from a PRP table
// over the buffer) that a stream::GpuSubmitter issues, as the layer streamer does. Command g of the
// plan goes to queue g % queues (the submitter's kernel: warp w copies templates w, w + Q, ...).
#pragma once
#include <optional>
#include <vector>

#include "gpu_rig.h"
#include "host/error.h"
#include "runtime/plan/command_plan.h"
#include "runtime/stream/gpu_submitter.h"

namespace gpunvme::test {

// `blocks` blocks from `lba` into the destination at `dst_offset` (a multiple of 4).
struct BlockRead {
  uint64_t lba = 0;
  uint32_t blocks = 0;
  uint64_t dst_offset = 0;
};

// A plan and the PRP table its commands point into: keep both alive while the reads run.
struct ReadPlan {
  plan::PrpTable table;
  plan::CommandPlan plan;
};

inline ReadPlan plan_reads(GpuRig& rig, stream::GpuSubmitter& gpu, const host::DmaBuffer& dst,
                           const std::vector<BlockRead>& reads) {
  ReadPlan p;
  p.table = plan::PrpTable(rig.ctrl->transport(), dst, rig.ctrl->page_bytes());
  const plan::PlanGeometry g{1, rig.lba, gpu.queues().max_blocks_per_command(), rig.ctrl->namespace_info(1).blocks};
  for (const BlockRead& r : reads)
    plan::append_extent(p.plan, model::Extent{r.lba, r.blocks, 0, uint64_t(r.blocks) * rig.lba}, r.dst_offset, g,
                        p.table);
  return p;
}

// Issues the plan's commands on `gpu` and waits for them (throws as GpuSubmitter::wait does).
inline void run_plan(stream::GpuSubmitter& gpu, const ReadPlan& p) { gpu.wait(gpu.issue(p.plan.commands)); }

// Runs a plan that must fail (a fault was injected): the error its ticket threw, or none.
inline std::optional<Error> failure_of(stream::GpuSubmitter& gpu, const ReadPlan& p) {
  try {
    run_plan(gpu, p);
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

}  // namespace gpunvme::test
