// The matrix-vector kernels' row loop with the input vector in shared memory (gpu_matmul.cu's
// matvec_kernel, gpu_forward.cu's matvec_fetched_kernel).
//
// Why: with a warp per row reading x from global memory, lane i reads group i's 32 floats, 128 bytes
// away from lane i + 1's, so each of a warp's float4 loads of x touched 32 cache lines, and x is 7 times
// the bytes of a Q4_K row: the kernel was bound by L1 at about 490 GB/s of weights on an H100. Here the
// block stages x once into shared memory, swizzled so that the same per-lane reads hit 8 distinct bank
// groups per quarter-warp (conflict-free), and a warp computes kRowsPerWarp rows against each group of x
// it reads. Each row's arithmetic is warp_dot_row's, operation for operation (the lane's groups in
// order, each group's 32 products in order, then the same butterfly): the results have the same bits,
// so a batched pass (gpu_matmul.cu's matmul_kernel) still gives single-token logits. The weights' bytes
// go through shared memory too (RowChunks, below), where the rows are 16-byte aligned: only the loads
// change, not the arithmetic.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "device/cuda_check.h"
#include "examples/llm/compute/gpu_matmul.h"
#include "examples/llm/compute/gpu_norm.cuh"
#include "examples/llm/compute/gpu_rows_lean.cuh"
#include "examples/llm/compute/gpu_warp.cuh"
#include "runtime/gguf/ggml_types.h"

namespace gpunvme::llm::gpu {

inline constexpr uint32_t kStagedWarps = 8;  // warps per block of the staged kernels
// Their launch bounds' blocks per SM: registers capped at 85 a thread so that three blocks fit instead of
// two. Under the cap some FP32 variants spill a few bytes (ptxas -v, CUDA 13.0, sm_90: gpu_matmul.cu's
// two-row F32, F16 and Q4_K kernels 4-36 bytes; not measured slower); gpu_forward.cu's
// matvec_fetched_kernel gives its spilling variants two blocks' registers instead (its comment lists them). On the H100, 2-7 % faster for Q4_K and Q6_K in one run, within the
// noise in another; four rows per warp, blocks capped at two per SM and an unrolled group loop measured
// no better (docs/performance.md, session 8).
inline constexpr uint32_t kStagedMinBlocks = 3;

// Weight staging (issue 36). Lane i decodes group i of each 32 groups of a row, so the lanes' own loads
// of the weights were narrow (Q6_K's 210-byte super-blocks are 2-byte aligned: 2-byte loads) and each
// warp load touched several blocks of the row: the L1 handled a few bytes per cycle and the kernel read
// Q6_K weights at 0.9 TB/s on an H200 (21 % of a copy's rate). Instead a warp copies the bytes of its
// rows' next 32 groups (a whole number of blocks) into shared memory with 16-byte cp.async loads, all of
// a warp's lanes reading consecutive bytes, kWeightStages chunks ahead, and each lane then decodes its
// own group from shared memory with the same dequant_group: the same values, the same sums in the same
// order, so the same bits. Rows whose start is not 16-byte aligned (row bytes not a multiple of 16, or a
// misaligned matrix), the unquantized types and the types whose blocks are whole 16-byte units (Q4_K's
// 144 bytes, Q5_K's 176: each lane's quants are already two aligned 16-byte loads) keep the direct loads:
// staged, Q4_K read 856 GB/s at 8192 x 8192 on the H200 and Llama-3-8B Q4_K decoded 7 % slower than with
// warp_dot_rows_q4k's register prefetch (the lead's run of e2fe9e7).
inline constexpr uint32_t kWeightStages = 3;
inline constexpr uint32_t kMaxRowsPerWarp = 2;  // the staged kernels' R: 1 or 2 (staged_launch)

// Bytes of 32 consecutive groups of a row of type t (a whole number of its blocks), 0 for the types whose
// weights are not staged (unquantized: a block is one element; blocks of whole 16-byte units).
constexpr uint32_t weight_chunk_bytes(GgmlType t) {
  const auto info = gguf::ggml_traits(t);
  if (info.block_size < uint32_t(kGroup) || info.type_size % 16 == 0) return 0;
  return 32 * uint32_t(kGroup) / info.block_size * info.type_size;
}
// A chunk's room in shared memory: its bytes plus the 16-byte units its unaligned ends straddle.
constexpr uint32_t weight_stage_span(GgmlType t) { return (weight_chunk_bytes(t) + 15) / 16 * 16 + 32; }
// Shared bytes a staged block needs for its warps' weight chunks (after x's), whatever R it runs.
constexpr uint32_t weight_stage_bytes(GgmlType t) {
  return weight_chunk_bytes(t) == 0 ? 0 : kStagedWarps * kMaxRowsPerWarp * kWeightStages * weight_stage_span(t);
}

// 16 bytes global -> shared without passing through registers (sm_80+), and the commit/wait of a lane's groups.
__device__ inline void cp_async_16(void* shared_dst, const void* global_src) {
  const uint32_t dst = uint32_t(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global_src) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int Pending>
__device__ inline void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory"); }

// The whole block copies x's `groups` groups into xs (coalesced loads, conflict-free stores), then waits.
// By cp.async: every thread's loads are in flight at once (as plain loads and stores, a thread's next load
// waited for its previous one: 8 latencies in a row for an 8192-wide x, before any row could start). The
// wait takes every copy this thread has in flight, a warp's first weight chunks too (block_rows).
__device__ inline void stage_vector(const float* x, uint32_t groups, float4* xs) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  for (uint32_t f = threadIdx.x; f < groups * 8; f += blockDim.x) cp_async_16(&xs[staged_index(f / 8, f % 8)], &x4[f]);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
}

// warp_dot_rows for Q4_K: the same sums, with the bytes of the lane's next (row, group) loaded before
// this one's arithmetic (load_q4k_group / decode_q4k_group, dequant.h), so that a warp has a load in
// flight while it computes (about 950 -> 1050 GB/s of weights on the H100, docs/performance.md session
// 11). One group ahead, not one per row: two per row spilled registers at two rows per warp.
template <uint32_t R>
__device__ inline void warp_dot_rows_q4k(const uint8_t* const (&row)[R], uint32_t groups, const float4* xs,
                                         uint32_t lane, float (&out)[R]) {
  float part[R];
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) part[r] = 0.0f;
  Q4kGroupBytes cur;
  if (lane < groups) cur = load_q4k_group(row[0], lane);
  for (uint32_t grp = lane; grp < groups; grp += 32) {
    float4 xv[kGroup / 4];
    staged_group(xs, grp, xv);
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) {
      Q4kGroupBytes next;  // rows in order within a group, then the lane's next group
      if (r + 1 < R) next = load_q4k_group(row[r + 1], grp);
      else if (grp + 32 < groups) next = load_q4k_group(row[0], grp + 32);
      float g[kGroup];
      decode_q4k_group(cur, grp, g);
      part[r] += group_dot(g, xv);
      cur = next;
    }
  }
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) out[r] = warp_sum(part[r]);
}

// warp_dot_rows for the other types: each group dequantized whole (dequant_group), then its sums.
template <GgmlType T, uint32_t R>
__device__ inline void warp_dot_rows_dequant(const uint8_t* const (&row)[R], uint32_t groups, const float4* xs,
                                             uint32_t lane, float (&out)[R]) {
  float part[R];
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) part[r] = 0.0f;
  for (uint32_t grp = lane; grp < groups; grp += 32) {
    float4 xv[kGroup / 4];
    staged_group(xs, grp, xv);
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) {
      float g[kGroup];
      dequant_group<T>(row[r], grp, g);
      part[r] += group_dot(g, xv);
    }
  }
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) out[r] = warp_sum(part[r]);
}

// A warp's pipeline of its R rows' bytes through shared memory (see kWeightStages), chunk by chunk (chunk
// c: groups 32c .. 32c + 31 of every row, whole blocks). start() copies the first kWeightStages - 1 chunks;
// arrive(c), before chunk c is read, starts the copy of chunk c + kWeightStages - 1 (into the buffer
// chunk c - 1 used) and waits for chunk c's; release(), after chunk c is read, lets its buffer be refilled.
// Every lane of the warp takes part in each call. `buf`: this warp's kWeightStages x R spans. Every row
// must start 16-byte aligned and end on a 16-byte boundary (weight_rows_stageable): the copy then reads
// no byte outside it.
template <GgmlType T, uint32_t R>
struct RowChunks {
  static constexpr uint32_t kChunk = weight_chunk_bytes(T), kSpan = weight_stage_span(T);
  const uint8_t* const (&row)[R];
  uint32_t groups, chunks, lane;
  uint8_t* buf;

  __device__ RowChunks(const uint8_t* const (&rows)[R], uint32_t groups_, uint32_t lane_, uint8_t* buf_)
      : row(rows), groups(groups_), chunks((groups_ + 31) / 32), lane(lane_), buf(buf_) {}

  // Chunk c of row r in shared memory: its offset within a 16-byte unit is kept, so the decode's aligned
  // loads (load_words) stay as wide as from global memory. Group `lane` of it is group 32c + lane of the row.
  __device__ const uint8_t* at(uint32_t c, uint32_t r) const {
    const uintptr_t from = reinterpret_cast<uintptr_t>(row[r]) + uint64_t(c) * kChunk;
    return buf + ((c % kWeightStages) * R + r) * kSpan + (from & 15u);
  }
  __device__ void issue(uint32_t c) const {  // always one commit group, empty past the last chunk
    if (c < chunks) {
      const uint32_t bytes = min(32u, groups - 32 * c) * kChunk / 32;  // a partial chunk is whole blocks
#pragma unroll
      for (uint32_t r = 0; r < R; ++r) {
        const uintptr_t from = reinterpret_cast<uintptr_t>(row[r]) + uint64_t(c) * kChunk, first = from & ~uintptr_t(15);
        const uint32_t units = uint32_t((from + bytes + 15 - first) / 16);
        uint8_t* dst = buf + ((c % kWeightStages) * R + r) * kSpan;
        for (uint32_t u = lane; u < units; u += 32) cp_async_16(dst + 16 * u, reinterpret_cast<const void*>(first + 16 * u));
      }
    }
    cp_async_commit();
  }
  __device__ void start() const {
#pragma unroll
    for (uint32_t c = 0; c + 1 < kWeightStages; ++c) issue(c);
  }
  __device__ void arrive(uint32_t c) const {
    issue(c + kWeightStages - 1);
    cp_async_wait<kWeightStages - 1>();  // this lane's copies of chunk c are done ...
    __syncwarp();                        // ... and every lane's are visible
  }
  __device__ void release() const { __syncwarp(); }
};

// Whether a matrix's rows can go through RowChunks: a staged type, every row 16-byte aligned at both ends.
template <GgmlType T>
__device__ inline bool weight_rows_stageable(const uint8_t* w, uint64_t row_bytes) {
  return weight_chunk_bytes(T) != 0 && (reinterpret_cast<uintptr_t>(w) | row_bytes) % 16 == 0;
}

// warp_dot_rows with the rows' bytes staged in shared memory: lane i decodes group 32c + i of each row
// from chunk c, in warp_dot_row's order.
// `started`: the caller already ran start() for these rows (block_rows, while the block staged x). Q6_K
// through gpu_rows_lean.cuh's q6k_chunk_dot (the same bits, fewer shifts).
template <GgmlType T, uint32_t R>
__device__ inline void warp_dot_rows_staged(const uint8_t* const (&row)[R], uint32_t groups, const float4* xs,
                                            uint32_t lane, uint8_t* buf, bool started, float (&out)[R]) {
  const RowChunks<T, R> ch(row, groups, lane, buf);
  if (!started) ch.start();
  float part[R];
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) part[r] = 0.0f;
  [[maybe_unused]] const Q6kLane q6(lane);
  for (uint32_t c = 0; c < ch.chunks; ++c) {
    ch.arrive(c);
    const uint32_t grp = 32 * c + lane;
    if (grp < groups) {
      float4 xv[kGroup / 4];
      staged_group(xs, grp, xv);
#pragma unroll
      for (uint32_t r = 0; r < R; ++r) {
        if constexpr (T == GgmlType::Q6_K) {  // gpu_rows_lean.cuh: the same sums, fewer shifts
          part[r] += q6k_chunk_dot(ch.at(c, r), q6, xv);
        } else {
          float g[kGroup];
          dequant_group<T>(ch.at(c, r), lane, g);
          part[r] += group_dot(g, xv);
        }
      }
    }
    ch.release();
  }
#pragma unroll
  for (uint32_t r = 0; r < R; ++r) out[r] = warp_sum(part[r]);
}

// R rows (pointers, every one valid; duplicates allowed) times the staged x by one warp; out[r] in every
// lane. The per-row operations are warp_dot_row's (see the file comment). With `stage`, through `buf`:
// this warp's weight chunks in shared memory (a pointer the compiler sees derive from the shared array
// whatever `stage` is, so that its loads are shared-memory loads, not generic ones). Q4_K and the
// unquantized types go through gpu_rows_lean.cuh's loops where the rows are 16-byte aligned, and Q6_K's
// staged chunks through its q6k_chunk_dot (the same bits); rows that are not aligned take this file's
// loops.
template <GgmlType T, uint32_t R>
__device__ inline void warp_dot_rows(const uint8_t* const (&row)[R], uint32_t groups, const float4* xs, uint32_t lane,
                                     bool stage, uint8_t* buf, bool started, float (&out)[R]) {
  if constexpr (weight_chunk_bytes(T) != 0) {
    if (stage) return warp_dot_rows_staged<T, R>(row, groups, xs, lane, buf, started, out);
  }
  if constexpr (T == GgmlType::Q4_K) {
    if (rows_aligned<16>(row)) return warp_dot_rows_q4k_lean<R>(row, groups, xs, lane, out);
  }
  if constexpr (kPlainLean<T>) {
    if (rows_aligned<16>(row)) return warp_dot_rows_plain_lean<T, R>(row, groups, xs, lane, out);
  }
  if constexpr (T == GgmlType::Q4_K)
    warp_dot_rows_q4k<R>(row, groups, xs, lane, out);
  else
    warp_dot_rows_dequant<T, R>(row, groups, xs, lane, out);
}

// The rows block_rows computes and where their results go. A row set has `count` rows (row(i): the bytes
// of row i, every row `groups` groups of one type), says whether all of them can go through RowChunks,
// and stores a warp's R dot products of rows first .. first + R - 1 (lane 0 calls it; rows past count
// are computed again as the last row and must not be stored). One matrix: y[i] = dot + bias[i].
struct MatrixRows {
  const uint8_t* w;
  uint64_t row_bytes;
  uint32_t count;
  const float* bias;
  float* y;
  __device__ const uint8_t* row(uint32_t i) const { return w + uint64_t(i) * row_bytes; }
  template <GgmlType T>
  __device__ bool stageable() const { return weight_rows_stageable<T>(w, row_bytes); }
  template <uint32_t R>
  __device__ void store(uint32_t first, const float (&dot)[R]) const {
#pragma unroll
    for (uint32_t r = 0; r < R; ++r)
      if (first + r < count) y[first + r] = dot[r] + (bias ? bias[first + r] : 0.0f);
  }
};

// The staged x (groups x 32 floats, staged_index's layout) times its RMS norm's scale and the norm's
// weights: rms_norm_kernel's output, element for element (x * scale * w, the scale by rms_scale over the
// same x with as many threads: kStagedWarps * 32 == kNormThreads), computed by every block that needs it.
__device__ inline void norm_staged(const float* x, uint32_t groups, float4* xs, const float* norm_w, float eps) {
  static_assert(kStagedWarps * 32 == kNormThreads, "the norm's scale must be summed as the norm kernel sums it");
  __shared__ double partial[kNormThreads / 32];
  const uint32_t n = groups * kGroup;
  const float scale = rms_scale(x, n, eps, partial);
  float* xf = reinterpret_cast<float*>(xs);
  // kNormAhead weights loaded before the first is used (one load after another: 16 latencies in a row
  // for a 4096-wide x, in every block of the launch).
  for (uint32_t e0 = threadIdx.x; e0 < n; e0 += kNormAhead * blockDim.x) {
    float g[kNormAhead];
#pragma unroll
    for (uint32_t j = 0; j < kNormAhead; ++j) {
      const uint32_t e = e0 + j * blockDim.x;
      g[j] = e < n ? norm_w[e] : 0.0f;
    }
#pragma unroll
    for (uint32_t j = 0; j < kNormAhead; ++j) {
      const uint32_t e = e0 + j * blockDim.x;
      if (e >= n) break;
      float& v = xf[4 * staged_index(e / kGroup, (e % kGroup) / 4) + e % 4];
      v = v * scale * g[j];
    }
  }
  __syncthreads();
}

// Every row of `rows` times x (each row's arithmetic warp_dot_row's, whatever the set): the block stages
// x into xs (stage_vector), its warps take R rows each and the blocks stride over the rows (each block
// stages x once, however many rows it computes). The block's dynamic shared memory holds x's groups,
// then weight_stage_bytes(T) for the weight chunks (staged_launch sizes it); rows that are all 16-byte
// aligned are read through them, the first rows' first chunks copied while the block stages x. With
// `norm_w`, the rows multiply x's RMS norm times norm_w (norm_staged) instead of x.
template <GgmlType T, uint32_t R, class Rows>
__device__ inline void block_rows(const Rows& rows, uint32_t groups, const float* x, float4* xs, const float* norm_w = nullptr,
                                  float eps = 0.0f) {
  static_assert(R >= 1 && R <= kMaxRowsPerWarp);
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, per_block = R * (blockDim.x / 32);
  const uint32_t n = rows.count;
  const bool stage = rows.template stageable<T>();
  uint8_t* buf = reinterpret_cast<uint8_t*>(xs + 8 * groups) + warp * (weight_stage_bytes(T) / kStagedWarps);
  auto rows_from = [&](uint32_t first, const uint8_t* (&p)[R]) {  // a partial last set repeats the last row
#pragma unroll
    for (uint32_t r = 0; r < R; ++r) p[r] = rows.row(min(first + r, n - 1));
  };
  // Row sets warp-major (set i: warp i / gridDim.x of block i % gridDim.x): when the sets do not divide
  // evenly among the warps (8192 rows in pairs over 3 blocks of 8 warps on 132 SMs: 1.29 sets a warp), the
  // warps that take one more are spread over every block and SM, not packed into the first blocks (whose
  // SMs then ran a whole extra round while the others idled).
  const uint32_t first0 = (warp * gridDim.x + blockIdx.x) * R;
  bool started = false;
  if (stage && first0 < n) {
    const uint8_t* p[R];
    rows_from(first0, p);
    RowChunks<T, R>(p, groups, lane, buf).start();
    started = true;
  }
  stage_vector(x, groups, xs);  // the whole block, then a barrier
  if (norm_w) norm_staged(x, groups, xs, norm_w, eps);
  for (uint32_t first = first0; first < n; first += gridDim.x * per_block) {
    const uint8_t* p[R];
    rows_from(first, p);
    float dot[R];
    warp_dot_rows<T, R>(p, groups, xs, lane, stage, buf, started, dot);
    started = false;
    if (lane == 0) rows.template store<R>(first, dot);
  }
}

// y[row] = W[row] . x (+ bias[row]) for every row of the matrix at w (block_rows over MatrixRows).
template <GgmlType T, uint32_t R>
__device__ inline void block_rows(const uint8_t* w, uint64_t row_bytes, uint32_t rows, uint32_t groups, const float* x,
                                  float4* xs, const float* bias, float* y) {
  block_rows<T, R>(MatrixRows{w, row_bytes, rows, bias, y}, groups, x, xs);
}

// Whether this block is the launch's last to get here, counted in *done: each block's stores are made
// visible device-wide (__threadfence) before it counts itself, and the last one fences again before it
// reads theirs. The caller's last block resets *done for the next launch.
__device__ inline bool last_to_finish(uint32_t* done) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(done, 1u) + 1 == gridDim.x;
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// Launch geometry of a staged kernel: rows per warp, blocks along x (with `count` along y) and the shared
// bytes; `staged` false when x does not fit in a block's shared memory (the caller then runs the
// warp-per-row kernel, which reads x from global memory).
struct StagedLaunch {
  bool staged = false;
  bool two_rows = false;  // kRowsPerWarp 2 for tall matrices; 1 keeps more blocks busy on short ones
  uint32_t blocks = 0;
  uint32_t shared_bytes = 0;
};
StagedLaunch staged_launch(uint32_t rows, uint32_t cols, uint32_t count, GgmlType type);

// The most dynamic shared memory a staged kernel may use (the device's opt-in limit per block), asked
// once.
uint32_t staged_shared_limit();
// The device's SMs, asked once (the same device as staged_launch's).
uint32_t device_sms();

// Lets kernel `K` use up to `bytes` of dynamic shared memory on the current device (above the default
// 48 KB a launch needs the opt-in), once per kernel and device: the attribute is the device's, so with
// several GPUs (--gpus) a kernel opted in on GPU 0 only fails its launches on GPU 1 ("invalid
// argument"). The GPUs' threads may launch at once, hence the lock.
template <auto K>
void opt_in_shared(uint32_t bytes, const char* what) {
  static std::mutex lock;
  static std::set<int> devices;  // where K is opted in
  int dev = 0;
  device::check_cuda(cudaGetDevice(&dev), what);
  const std::lock_guard<std::mutex> held(lock);
  if (devices.count(dev)) return;
  device::check_cuda(cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)), what);
  devices.insert(dev);
}

// Lets kernel `K` use as much dynamic shared memory as the device allows a block beside K's static
// shared memory (staged_shared_limit() less it: the attribute is refused beyond, "invalid argument"), and
// returns that many bytes. A kernel that normalizes its input (norm_staged) has 64 static bytes.
template <auto K>
uint32_t allow_staged_shared() {
  static const uint32_t fixed = [] {
    cudaFuncAttributes a{};
    device::check_cuda(cudaFuncGetAttributes(&a, K), "cudaFuncGetAttributes (a staged matrix kernel)");
    return uint32_t(a.sharedSizeBytes);
  }();
  const uint32_t bytes = staged_shared_limit() - fixed;
  opt_in_shared<K>(bytes, "cudaFuncSetAttribute (the staged matrix kernel's shared memory)");
  return bytes;
}

// The cap on a staged launch's blocks along x (count of them along y): no more than the device holds at
// once by kernel K's registers as well as its shared memory (shared_bytes dynamic). staged_launch counts
// shared memory only (8 blocks an SM for a 4096-wide x, where K's 85 registers a thread allow 3), so blocks
// queued behind the resident ones each staged x again (and, normalizing, recomputed the norm) for their 16
// rows: Llama-3-8B's gate/up launch had 1,056 blocks, each reading 16 KB of x and 32 KB for the norm beside
// its 37 KB of weights. Capped, each block strides over more rows (block_rows) after staging x once. Asked
// of CUDA once per kernel, device and shared size (a launch's host time must not grow); the GPUs' threads
// may launch at once, hence the lock. kThreads: K's block size (the 8-bit batch kernel's 512 too).
template <auto K, uint32_t kThreads = kStagedWarps * 32>
uint32_t resident_cap(uint32_t blocks, uint32_t count, uint32_t shared_bytes) {
  static std::mutex lock;
  static std::map<std::pair<int, uint32_t>, uint32_t> per_sm;  // (device, shared bytes) -> blocks an SM
  int dev = 0;
  device::check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  uint32_t n = 0;
  {
    const std::lock_guard<std::mutex> held(lock);
    auto it = per_sm.find({dev, shared_bytes});
    if (it == per_sm.end()) {
      int b = 0;
      device::check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, K, kThreads, shared_bytes),
                         "cudaOccupancyMaxActiveBlocksPerMultiprocessor (a staged kernel)");
      it = per_sm.emplace(std::make_pair(dev, shared_bytes), uint32_t(std::max(b, 1))).first;
    }
    n = it->second;
  }
  const uint64_t resident = uint64_t(device_sms()) * n;
  return uint32_t(std::max<uint64_t>(1, std::min<uint64_t>(blocks, (resident + count - 1) / count)));
}

}  // namespace gpunvme::llm::gpu
