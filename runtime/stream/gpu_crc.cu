#include "runtime/stream/gpu_crc.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "device/cuda_check.h"
#include "runtime/model/crc32c_math.h"

namespace gpunvme::stream {
namespace {

using device::check_cuda;
namespace m = model;

// Built at compile time from crc32c_math.h, copied into shared memory by each block (the table
// lookups are data-dependent: constant memory would serialize them).
__device__ const m::Crc32cTables kTables = m::make_crc32c_tables();
__device__ const m::Crc32cPowers kPowers = m::make_crc32c_powers();
constexpr uint32_t kRowBytes = 512;  // a warp's row: 32 lanes x 16 bytes
__device__ const m::Crc32cMulTable kRowShift = m::make_crc32c_mul_table(m::crc32c_shift(kRowBytes, m::make_crc32c_powers().x2k));

constexpr uint32_t kWarpsPerBlock = 4;
constexpr uint32_t kSpans = 32;  // warps (spans) per piece: the combine kernel joins them in one warp
constexpr uint32_t kBlocksPerPiece = kSpans / kWarpsPerBlock;
constexpr uint32_t kFull = 0xFFFFFFFFu;
constexpr uint32_t kUnroll = 4;  // rows a warp has in flight: over the link one row waits a microsecond or two

struct SpanCrc {
  uint32_t crc;
  uint32_t pad;
  uint64_t bytes;
};

struct Shared {
  uint32_t t[8][256];
  uint32_t row[4][256];  // times x^(8 * kRowBytes)
  uint32_t x2k[64];
};

__device__ void load_tables(Shared& s) {
  for (uint32_t i = threadIdx.x; i < 8 * 256; i += blockDim.x) s.t[i / 256][i % 256] = kTables.t[i / 256][i % 256];
  for (uint32_t i = threadIdx.x; i < 4 * 256; i += blockDim.x) s.row[i / 256][i % 256] = kRowShift.t[i / 256][i % 256];
  for (uint32_t i = threadIdx.x; i < 64; i += blockDim.x) s.x2k[i] = kPowers.x2k[i];
  __syncthreads();
}

__device__ uint32_t crc_bytes(const uint8_t* p, uint64_t n, const Shared& s) {
  uint32_t c = ~0u;
  for (uint64_t i = 0; i < n; ++i) c = m::crc32c_fold1(c, p[i], s.t);
  return ~c;
}

// crc and byte count of the warp's lanes joined in lane order (lanes 0..31): a shuffle tree.
__device__ void warp_join(uint32_t& crc, uint64_t& bytes, const uint32_t* x2k) {
  const uint32_t lane = threadIdx.x & 31u;
  for (uint32_t d = 1; d < 32; d *= 2) {
    const uint32_t oc = __shfl_down_sync(kFull, crc, d);
    const uint64_t ob = __shfl_down_sync(kFull, bytes, d);
    if (lane % (2 * d) == 0 && lane + d < 32) {
      crc = m::crc32c_combine_with(crc, oc, ob, x2k);
      bytes += ob;
    }
  }
  crc = __shfl_sync(kFull, crc, 0);
  bytes = __shfl_sync(kFull, bytes, 0);
}

// Piece y of the batch: warp w of its kSpans CRCs rows [w * per, (w + 1) * per) of the piece's
// 16-byte-aligned body (32 words a row, a lane's word 16 bytes); warp 0 also takes the unaligned head,
// the last warp the tail. A lane's words are 512 bytes apart, so each lane keeps a Horner sum of
// theirs, acc = acc * x^(8 * 512) + crc(word) (a table multiply, kRowShift), and once at the end
// the lanes' sums, each shifted by the bytes that follow its last word, XOR into the span's CRC:
// crc(w_0 .. w_n-1) = sum of crc(w_i) * x^(8 * 16 * (n - 1 - i)), the combine rule unrolled.
__global__ void crc_spans_kernel(const GpuCrcPiece* pieces, uint32_t first, uint32_t count, const uint32_t* state,
                                 SpanCrc* spans) {
  __shared__ Shared s;
  if (state) {
    first = state[crc_state::kBatchFirst];
    count = state[crc_state::kBatchCount];
  }
  const uint32_t y = blockIdx.y;
  if (y >= count) return;  // a device batch's grid is sized for the largest: most blocks leave here
  load_tables(s);
  const GpuCrcPiece piece = pieces[first + y];
  const uint32_t lane = threadIdx.x & 31u;
  const uint32_t w = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const auto* p = static_cast<const uint8_t*>(piece.src);
  const uint64_t head = min(piece.bytes, uint64_t((16 - reinterpret_cast<uintptr_t>(p) % 16) % 16));
  const uint64_t words = (piece.bytes - head) / 16;
  const uint64_t tail = piece.bytes - head - words * 16;
  const auto* body = reinterpret_cast<const uint4*>(p + head);
  const uint64_t rows = (words + 31) / 32, per = (rows + kSpans - 1) / kSpans;
  const uint64_t w0 = min(words, w * per * 32), w1 = min(words, (w + 1) * per * 32);
  uint32_t crc = 0;
  uint64_t bytes = 0;
  if (w == 0 && head) crc = crc_bytes(p, head, s), bytes = head;
  uint32_t acc = 0;
  for (uint64_t r = w0; r < w1; r += 32 * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      const uint64_t i = r + u * 32 + lane;
      if (i < w1) v[u] = body[i];
    }
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      if (r + u * 32 + lane >= w1) continue;  // only in the span's last row
      const uint32_t c = m::crc32c_fold8(~0u, v[u].x, v[u].y, s.t);
      acc = m::crc32c_mul_by(acc, s.row) ^ ~m::crc32c_fold8(c, v[u].z, v[u].w, s.t);
    }
  }
  if (w1 > w0) {
    // Lanes with a word in the last row (the first `last` lanes) are followed by 16 * (last - 1 - lane)
    // bytes; the others' last word is a row earlier, 16 * (32 + last - 1 - lane) bytes from the end.
    const uint32_t last = uint32_t((w1 - w0 - 1) % 32) + 1;
    const uint32_t after = lane < last ? last - 1 - lane : 32 + last - 1 - lane;
    uint32_t part = m::crc32c_mulmod(m::crc32c_shift(16ull * after, s.x2k), acc);
    for (uint32_t d = 16; d > 0; d /= 2) part ^= __shfl_xor_sync(kFull, part, d);
    crc = m::crc32c_combine_with(crc, part, 16 * (w1 - w0), s.x2k);
    bytes += 16 * (w1 - w0);
  }
  if (w == kSpans - 1 && tail) {
    crc = m::crc32c_combine_with(crc, crc_bytes(p + head + words * 16, tail, s), tail, s.x2k);
    bytes += tail;
  }
  if (lane == 0) spans[size_t(y) * kSpans + w] = {crc, 0, bytes};
}

// One warp per piece: its kSpans span CRCs joined in order into the piece's CRC, written to the
// results (pinned host memory) with `done` set last.
__global__ void join_spans_kernel(const GpuCrcPiece* pieces, uint32_t first, uint32_t count, const uint32_t* state,
                                  const SpanCrc* spans, GpuCrcResult* out) {
  __shared__ uint32_t x2k[64];
  if (state) {
    first = state[crc_state::kBatchFirst];
    count = state[crc_state::kBatchCount];
  }
  const uint32_t y = blockIdx.x;
  if (y >= count) return;
  for (uint32_t i = threadIdx.x; i < 64; i += blockDim.x) x2k[i] = kPowers.x2k[i];
  __syncthreads();
  const uint32_t lane = threadIdx.x;
  const SpanCrc sp = spans[size_t(y) * kSpans + lane];
  uint32_t crc = sp.crc;
  uint64_t bytes = sp.bytes;
  warp_join(crc, bytes, x2k);
  if (lane == 0) {
    const GpuCrcPiece piece = pieces[first + y];
    GpuCrcResult& r = out[first + y];
    r.offset = piece.offset;
    r.bytes = piece.bytes;
    r.crc = crc;
    __threadfence_system();
    r.done = bytes == piece.bytes ? 1u : 2u;  // 2: the spans missed bytes (a bug, take() throws)
  }
}

template <class T>
T* host_alloc(uint64_t n, T** dev, const char* what) {
  void* h = nullptr;
  check_cuda(cudaHostAlloc(&h, std::max<uint64_t>(n, 1) * sizeof(T), cudaHostAllocMapped), what);
  std::fill_n(static_cast<uint8_t*>(h), std::max<uint64_t>(n, 1) * sizeof(T), uint8_t(0));
  void* d = nullptr;
  check_cuda(cudaHostGetDevicePointer(&d, h, 0), what);
  *dev = static_cast<T*>(d);
  return static_cast<T*>(h);
}

}  // namespace

GpuCrcLog::GpuCrcLog(uint64_t capacity, uint32_t max_batch, Appender who)
    : capacity_(capacity), max_batch_(std::clamp<uint32_t>(max_batch, 1, 65535)), who_(who) {
  pieces_ = host_alloc<GpuCrcPiece>(capacity_, &pieces_dev_, "pinned memory for the GPU CRC's pieces");
  results_ = host_alloc<GpuCrcResult>(capacity_, &results_dev_, "pinned memory for the GPU CRC's results");
  state_ = host_alloc<uint32_t>(crc_state::kWords, &state_dev_, "pinned memory for the GPU CRC's state");
  check_cuda(cudaMalloc(&partials_, size_t(max_batch_) * kSpans * sizeof(SpanCrc)), "cudaMalloc for the GPU CRC's spans");
}

GpuCrcLog::~GpuCrcLog() {
  cudaFree(partials_);
  cudaFreeHost(state_);
  cudaFreeHost(results_);
  cudaFreeHost(pieces_);
}

void GpuCrcLog::launch(uint32_t first, uint32_t count, const uint32_t* state, cuda_stream_t s) {
  auto st = reinterpret_cast<cudaStream_t>(s);
  auto* spans = static_cast<SpanCrc*>(partials_);
  crc_spans_kernel<<<dim3(kBlocksPerPiece, count), kWarpsPerBlock * 32, 0, st>>>(pieces_dev_, first, count, state, spans);
  check_cuda(cudaGetLastError(), "GPU CRC kernel launch");
  join_spans_kernel<<<count, 32, 0, st>>>(pieces_dev_, first, count, state, spans, results_dev_);
  check_cuda(cudaGetLastError(), "GPU CRC join kernel launch");
}

void GpuCrcLog::enqueue(std::span<const GpuCrcPiece> pieces, cuda_stream_t s) {
  if (who_ != Appender::kHost) throw std::logic_error("GpuCrcLog::enqueue on a log its kernels append to");
  if (appended_ + pieces.size() > capacity_)
    throw std::logic_error("GpuCrcLog: " + std::to_string(appended_ + pieces.size()) + " pieces, room for " +
                           std::to_string(capacity_));
  // A batch reuses the span buffer: batches on one stream run one after another.
  for (size_t at = 0; at < pieces.size(); at += max_batch_) {
    const uint32_t n = uint32_t(std::min<size_t>(max_batch_, pieces.size() - at));
    std::copy_n(pieces.begin() + at, n, pieces_ + appended_);
    launch(uint32_t(appended_), n, nullptr, s);
    appended_ += n;
  }
}

void GpuCrcLog::enqueue_appended(cuda_stream_t s) {
  if (who_ != Appender::kDevice) throw std::logic_error("GpuCrcLog::enqueue_appended on a log the host appends to");
  launch(0, max_batch_, state_dev_, s);  // blocks past the batch's count return at once
}

std::span<const GpuCrcResult> GpuCrcLog::take() {
  const volatile uint32_t* st = state_;
  if (who_ == Appender::kDevice) {
    if (st[crc_state::kOverflow]) throw std::logic_error("GpuCrcLog: a device appender found no room for its pieces");
    appended_ = st[crc_state::kAppended];
  }
  const uint64_t from = taken_;
  for (uint64_t i = from; i < appended_; ++i) {
    const volatile uint32_t* done = &results_[i].done;
    if (*done != 1)
      throw std::logic_error("GpuCrcLog: result " + std::to_string(i) + (*done ? " covers other bytes than its piece"
                                                                                : " taken before its kernel ran"));
  }
  taken_ = appended_;
  return {results_ + from, results_ + appended_};
}

}  // namespace gpunvme::stream
