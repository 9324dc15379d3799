#include "examples/llm/engine/gpu_load_check.h"

#include <algorithm>

#include "device/cuda_check.h"
#include "runtime/stream/gpu_expert_fetcher.h"

namespace gpunvme::llm {

GpuLoadCheck::GpuLoadCheck(LoadCheck& check, const ModelOnDevice& m, const stream::LayerStreamer* streamer,
                           const stream::GpuExpertFetcher* fetcher, uint32_t max_experts)
    : check_(check), m_(m) {
  if (streamer) {
    // Every piece is checked once over the run: the log holds them all (slot 0's plan stands for
    // every slot's: a layer's pieces are the same extents in each).
    uint64_t all = 0, widest = 0;
    streamed_done_.assign(streamer->layer_count(), false);
    for (uint32_t i = 0; i < streamer->layer_count(); ++i) {
      uint64_t n = 0;
      for (const SlotPiece& p : slot_pieces(streamer->plan(i, 0))) n += check_.pending(p.offset, p.bytes).size();
      all += n;
      widest = std::max(widest, n);
      streamed_done_[i] = n == 0;
    }
    if (all) streamed_log_ = std::make_unique<stream::GpuCrcLog>(all, uint32_t(std::min<uint64_t>(widest, 65535)));
  }
  if (fetcher) {
    const uint64_t start = m.map->start_lba() * m.lba_size();
    const stream::ExpertCatalog& cat = fetcher->catalog();
    std::vector<std::vector<stream::ExpertPartBytes>> parts(cat.parts.size());
    bool any = false;
    for (size_t k = 0; k < cat.parts.size(); ++k)
      for (const stream::ExpertPart& p : cat.parts[k]) {
        const uint64_t off = p.extent.first_lba * m.lba_size() + p.extent.byte_in_first - start;
        const bool check_it = !check_.pending(off, p.extent.byte_length).empty();
        parts[k].push_back({off, p.extent.byte_length, check_it});
        any |= check_it;
      }
    if (any) {
      experts_ = std::make_unique<stream::GpuExpertCrc>(*fetcher, parts, check_.chunk_shift(), max_experts);
      int lo = 0, hi = 0;
      cudaStream_t side = nullptr;
      device::check_cuda(cudaDeviceGetStreamPriorityRange(&lo, &hi), "stream priorities");
      device::check_cuda(cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, lo), "expert check stream");
      side_.reset(side);
      consumed_ = stream::make_event("expert check event");
      done_ = stream::make_event("expert check event");
      for (stream::CudaEvent& e : staged_done_) e = stream::make_event("expert check event");
    }
  }
}

GpuLoadCheck::~GpuLoadCheck() {
  if (side_) cudaStreamSynchronize(side_.get());  // its kernels read the fetcher's slots and the log
}

std::vector<GpuLoadCheck::SlotPiece> GpuLoadCheck::slot_pieces(const plan::CommandPlan& p) const {
  const uint64_t start = m_.map->start_lba() * m_.lba_size();
  std::vector<SlotPiece> out;
  for (const plan::Piece& piece : p.pieces) {
    const uint64_t dev = piece.source.first_lba * m_.lba_size() + piece.source.byte_in_first;
    out.push_back({dev - start, piece.source.byte_length, piece.data_offset});
  }
  return out;
}

void GpuLoadCheck::streamed(uint32_t index, const stream::SlotView& v, stream::cuda_stream_t s) {
  if (!streamed_log_ || index >= streamed_done_.size() || streamed_done_[index]) return;
  streamed_done_[index] = true;
  std::vector<stream::GpuCrcPiece> pieces;
  const auto* slot = static_cast<const uint8_t*>(v.device);
  for (const SlotPiece& p : slot_pieces(*v.plan))
    for (const LoadCheck::Range& r : check_.pending(p.offset, p.bytes))
      pieces.push_back({slot + p.slot_offset + (r.offset - p.offset), r.offset, r.bytes});
  // Pieces checked since the log was sized (another reader's) are skipped, so this never exceeds it.
  if (!pieces.empty()) streamed_log_->enqueue(pieces, s);
}

void GpuLoadCheck::experts(stream::cuda_stream_t s, const stream::StagedExperts& staged) {
  if (!experts_ || expert_bytes_ >= experts_->bytes_to_check()) return;
  cudaStream_t side = side_.get();
  const auto side_s = reinterpret_cast<stream::cuda_stream_t>(side);
  device::check_cuda(cudaEventRecord(consumed_.get(), reinterpret_cast<cudaStream_t>(s)), "expert check: consumers enqueued");
  device::check_cuda(cudaStreamWaitEvent(side, consumed_.get(), 0), "expert check: wait for the consumers");
  experts_->append(side_s, staged);
  // Staged, the CRCs read the copies, not the slots: the next fetch waits only for the tables' read.
  if (staged.base) device::check_cuda(cudaEventRecord(done_.get(), side), "expert check: tables read");
  experts_->crc(side_s);
  device::check_cuda(cudaEventRecord((staged.base ? staged_done_[staged.buffer & 1] : done_).get(), side), "expert check: done");
}

void GpuLoadCheck::end_pass() {
  if (streamed_log_)
    for (const stream::GpuCrcResult& r : streamed_log_->take()) check_.add_gpu(r.offset, r.bytes, r.crc);
  if (experts_) device::check_cuda(cudaStreamSynchronize(side_.get()), "expert check stream");
  if (experts_)
    for (const stream::GpuCrcResult& r : experts_->take()) {
      check_.add_gpu(r.offset, r.bytes, r.crc);
      expert_bytes_ += r.bytes;
    }
  check_.throw_if_mismatch();
}

}  // namespace gpunvme::llm
