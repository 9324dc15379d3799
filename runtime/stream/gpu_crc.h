// CRC-32C of byte ranges on the GPU, for bytes that reach GPU-visible memory without passing through
// the host: a streaming slot or an expert cache slot (pinned host memory the GPU reads in place), or
// device memory. Each range (a "piece") is cut into 32 spans, one per warp; a warp reads its span
// 512 bytes at a time, coalesced (16 bytes a lane), CRCs each lane's 16 bytes with the slice-by-8
// tables and folds them into the lane's running sum with the combine operation (a multiply by the
// fixed shift of one row); the lanes' sums join once at the span's end, and a second kernel joins the
// 32 span CRCs of each piece in a shuffle tree (runtime/model/crc32c_math.h: the one CRC arithmetic
// of the host and the GPU). One CRC per piece lands in pinned host memory, which the host
// reads after it synchronized with the stream anyway (the engine: at the end of a pass, when its
// logits are on the host): no extra synchronization on the hot path.
//
// A log holds every piece of its life (capacity): each is written once, so a kernel still reading one
// never sees it reused. Pieces come from the host (enqueue) or from a kernel on the GPU that appends
// them itself (Appender::kDevice: the expert check, gpu_expert_crc.h, which learns the routed experts
// on the GPU).
#pragma once
#include <cstdint>
#include <span>

#include "runtime/stream/cuda_stream.h"

namespace gpunvme::stream {

struct GpuCrcPiece {
  const void* src = nullptr;  // GPU-visible bytes
  uint64_t offset = 0;        // the caller's name for them (the engine: their offset in the model)
  uint64_t bytes = 0;
};
struct GpuCrcResult {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint32_t crc = 0;  // crc32c() of the piece's bytes
  uint32_t done = 0; // 1 once the kernel wrote it
};
static_assert(sizeof(GpuCrcPiece) == 24 && sizeof(GpuCrcResult) == 24);

// Words of a device-appended log's state (GpuCrcLog::device_state()).
namespace crc_state {
inline constexpr uint32_t kAppended = 0;   // pieces appended so far
inline constexpr uint32_t kBatchFirst = 1; // the latest batch: its first piece
inline constexpr uint32_t kBatchCount = 2; // and its count (<= max_batch)
inline constexpr uint32_t kOverflow = 3;   // nonzero: an appender found no room (a bug, reported by take())
inline constexpr uint32_t kWords = 4;
}  // namespace crc_state

class GpuCrcLog {
 public:
  enum class Appender { kHost, kDevice };
  // capacity: pieces over the log's life; max_batch: pieces per enqueue (per device batch).
  GpuCrcLog(uint64_t capacity, uint32_t max_batch, Appender who = Appender::kHost);
  ~GpuCrcLog();
  GpuCrcLog(const GpuCrcLog&) = delete;
  GpuCrcLog& operator=(const GpuCrcLog&) = delete;

  uint64_t capacity() const { return capacity_; }
  uint32_t max_batch() const { return max_batch_; }
  // kHost: appends `pieces` and enqueues their CRCs on `s`; returns at once. Throws std::logic_error
  // past the capacity.
  void enqueue(std::span<const GpuCrcPiece> pieces, cuda_stream_t s);
  // kDevice: the piece array and the state words (crc_state) in mapped pinned memory, for the kernel
  // that appends; enqueue_appended() then CRCs the batch the state names, after that kernel on `s`.
  GpuCrcPiece* device_pieces() const { return pieces_dev_; }
  uint32_t* device_state() const { return state_dev_; }
  void enqueue_appended(cuda_stream_t s);
  // The results written since the last take(): call after synchronizing with the streams the batches
  // were enqueued on. Throws std::logic_error for a result not written yet or an overflow.
  std::span<const GpuCrcResult> take();

 private:
  void launch(uint32_t first, uint32_t count, const uint32_t* state, cuda_stream_t s);

  uint64_t capacity_ = 0;
  uint32_t max_batch_ = 0;
  Appender who_;
  GpuCrcPiece* pieces_ = nullptr;      // pinned host memory (mapped)
  GpuCrcPiece* pieces_dev_ = nullptr;  // its device address
  GpuCrcResult* results_ = nullptr;
  GpuCrcResult* results_dev_ = nullptr;
  uint32_t* state_ = nullptr;
  uint32_t* state_dev_ = nullptr;
  void* partials_ = nullptr;           // device memory: [max_batch][kSpans] span CRCs
  uint64_t appended_ = 0, taken_ = 0;  // kHost's count (kDevice: state_[kAppended])
};

}  // namespace gpunvme::stream
