// Fetched experts copied into GPU memory before their one-token products (issue 33). A fetched expert
// lies in the fetcher's scratchpad, pinned host memory the GPU reads through its link: its products
// read it there, and the first-use load check (gpu_load_check.h) read it there a second time, after
// the layer's products, with the next layer's fetch waiting for that check (it may overwrite the
// slots). On Qwen3-235B-A22B 22G:32G over PCIe 5 that second crossing was about 4 GB a token, and the
// wait sat between every layer's products and the next layer's reads. Here each part's slice is
// copied (one kernel of wide loads) into one of two VRAM buffers once its readiness word says it is
// in, and the product reads the copy: same bytes, same kernel, same bits. The check then reads the
// copy in VRAM (stream::StagedExperts), and the next fetch waits only for it to have read the fetch's
// tables. Two buffers: the check of one fetch reads its buffer while the next fetch fills the other.
// GPUNVME_EXPERT_STAGE=hits (not the default): the hits (RAM expert cache, pre-gating's right guesses)
// need no read, so where the source says when the fetch is placed (ExpertSource::after_placement), a
// kernel on a stream of its own copies them whole right then, beside the misses' reads, so that their
// link crossing is not queued behind a miss earlier in routing order. Measured once at 89 % against
// 93 % part by part (with a copy of every SM's worth of blocks, since cut to 96): the default is the
// part copies. =0: no staging (products and check read the scratchpad, as before: the A/B switches);
// a failed allocation turns it off too (the buffers are outside the VRAM budget: 2 x k x an expert).
#pragma once
#include <cstdint>

#include "runtime/model/tensor_names.h"
#include "runtime/stream/gpu_fetch_types.h"

namespace gpunvme::llm {

using gpu_stream_t = struct CUstream_st*;
class ExpertSource;  // gpu_forward.h

class ExpertStaging {
 public:
  ExpertStaging();  // reads GPUNVME_EXPERT_STAGE; allocates nothing yet
  ~ExpertStaging();
  ExpertStaging(const ExpertStaging&) = delete;
  ExpertStaging& operator=(const ExpertStaging&) = delete;

  // After a fetch of `experts` routing ids (distinct) from `src` is enqueued on `s`: the buffer its
  // products copy into (the other one than the last fetch's), after `s` waited for its other readers
  // (ExpertSource::before_staging) and for the copy of its hits. Base null: not staged (off, the
  // source has no slot size, or no memory), so the products read the scratchpad.
  stream::StagedExperts next(ExpertSource& src, uint32_t experts, gpu_stream_t s);
  // On `s`, after the wait for the slice: bytes [b0, b1) of routing id k's part `proj` (of `part_bytes`,
  // else nothing is copied, as the product then finds no such part) into `st`.
  void copy(gpu_stream_t s, const ExpertSource& src, const stream::StagedExperts& st, uint32_t k,
            model::Projection proj, uint64_t part_bytes, uint64_t b0, uint64_t b1) const;
  bool enabled() const { return enabled_; }

 private:
  bool enabled_ = true;
  bool hits_ = false;         // the hits copied at the placement (stage_hits_kernel; GPUNVME_EXPERT_STAGE=hits)
  struct CUstream_st* side_ = nullptr;                     // their stream
  struct CUevent_st *before_ = nullptr, *hits_done_ = nullptr;  // compute -> side, side -> compute
  uint8_t* mem_ = nullptr;     // both buffers (cudaMalloc), aligned up to kStagedAlign at base_
  uint8_t* base_ = nullptr;
  uint64_t stride_ = 0, buffer_bytes_ = 0;
  uint32_t experts_ = 0, turn_ = 0;
};

}  // namespace gpunvme::llm
