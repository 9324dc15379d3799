// Attention of the small passes (1..32 tokens a segment: decode, speculative verification, several
// sequences in one pass) split along the positions, flash-decoding style (issue 36). The kernel it
// replaced ran one block per query head, serial over the positions: 15-26 us a layer at a few dozen
// positions, and the bottleneck at long context (Llama-3-70B decoding at 2,048 positions: 6.8 tok/s).
//
// A block takes one token, one KV head's group of up to HB query heads (GQA: K and V are read once for
// all of them) and one chunk of the positions the token sees. Its warps take the chunk's positions in
// turn, T lanes a position (16-byte loads: 8 halves a lane, a row in one instruction of T lanes), and keep
// an online softmax (running maximum, sum and weighted V) per head; the warps' states are then merged in
// warp order, and a chunk's state goes to memory. The last block of a (token, KV-head group) to finish
// (an atomic counter it puts back to 0, so a graph replays it) merges the chunks in chunk order, adds
// the sink (gpt-oss: it joins the maximum and the sum, takes no value), divides, and writes the output.
// A token that sees one chunk finishes in its block, without the round trip through memory.
//
// Bits: the chunks depend only on how many positions the token sees (decode_split) and the constants
// below, the order of every sum is fixed, so a token's output depends on nothing else: not on the pass
// (1 token or 32), its place in it, nor other sequences; speculative verification and several sequences
// keep a lone token's bits. The grid is fixed for a pass shape (every chunk a token could have; blocks
// past its chunks return at once): a graph captured at one position replays at any other.
//
// With `own` (Backend::rope_store_attend, one token: its Q/K norms, RoPE and KV store in the same
// launch), each block norms and rotates its Q heads in shared memory, and the block of the last chunk
// (the one holding the token's own position) its KV head's K; that block's first head group writes the
// K and V halves into the cache, and every block reading position pos reads the shared halves (the values
// the cache row holds). Q is written back rotated by the finishing block (all others have read it by
// then). The arithmetic is norm_rope_head's, as rope_store_kernel's, so the fused launch has the bits of
// rope_store_kv followed by the plain launch.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "examples/llm/compute/gpu_warp.cuh"
#include "examples/llm/compute/ops.h"

namespace gpunvme::llm::gpu {

// One head (in global or shared memory) normed by norm_w where given, then rotated at pos, by one warp:
// the arithmetic of every Q/K head of a pass (rope_store_kernel, and the attention's own token).
struct HeadRope {
  uint32_t head_dim, n_rot;
  float eps;
  RopeParams rope;
  RopeLayout layout;
};
__device__ inline void norm_rope_head(float* h, const float* norm_w, uint32_t pos, const HeadRope& r, uint32_t lane) {
  const uint32_t head_dim = r.head_dim;
  if (norm_w) {
    float ss = 0.0f;
    for (uint32_t i = lane; i < head_dim; i += 32) ss += h[i] * h[i];
    ss = warp_sum(ss);
    const float scale = 1.0f / sqrtf(ss / float(head_dim) + r.eps);
    __syncwarp();
    for (uint32_t i = lane; i < head_dim; i += 32) h[i] = h[i] * scale * norm_w[i];
    __syncwarp();
  }
  for (uint32_t i = lane; i < r.n_rot / 2; i += 32) rope_pair_of(h, i, r.n_rot, pos, r.rope, r.layout);
}

struct OwnToken {  // the fused launch's token: its Q, K and V heads as the products wrote them, norms, RoPE
  const float *k = nullptr, *v = nullptr;  // k is not written (every block of a group rotates its own copy)
  const float *q_norm = nullptr, *k_norm = nullptr;
  HeadRope r;
};

inline constexpr uint32_t kDecodeWarps = 4;           // warps a block
inline constexpr uint32_t kDecodeSteps = 4;           // position steps a warp loads ahead of their arithmetic
inline constexpr uint32_t kDecodeMaxSplits = 16;      // chunks a token's positions take at most (the grid's x)
inline constexpr uint32_t kDecodeSplitCap = kDecodeMaxSplits;  // the merge's registers: chunks of an output loaded at once
// The merge's maxima, sums and factors fit in the warps' state space (heads of 32 dimensions at least).
static_assert(kDecodeMaxSplits <= kDecodeSplitCap && 3 * kDecodeMaxSplits + 1 <= kDecodeWarps * 32);
inline constexpr uint32_t kDecodeChunk = 128;         // positions a chunk takes at least
inline constexpr uint32_t kDecodeTokens = 32;         // tokens a launch (the chunk states' buffer is sized for them)
inline constexpr uint32_t kDecodeMaxHeadDim = 256;    // 8 halves a lane, 32 lanes
inline constexpr uint32_t kDecodeMaxGroup = 4;        // query heads a block at most (a wider GQA group: more blocks)

// How a token seeing `seen` positions splits them: `count` chunks of `size` (the last may be shorter).
struct DecodeSplit {
  uint32_t count, size;
};
__host__ __device__ inline DecodeSplit decode_split(uint32_t seen, uint32_t max_splits, uint32_t min_chunk) {
  uint32_t size = (seen + max_splits - 1) / max_splits;
  if (size < min_chunk) size = min_chunk;
  return {(seen + size - 1) / size, size};
}

struct DecodeArgs {
  float* q;                  // [token][n_head][head_dim]; the fused launch writes its heads back rotated
  __half *kc, *vc;           // the layer's cache, [slot][n_ctx][kv_dim]
  uint32_t kv_dim, head_dim, n_head, group;  // group: query heads per KV head
  uint32_t window;           // 0: every position up to the token's
  const uint32_t *positions, *slots;
  uint64_t slot_stride;      // halves of a slot's cache
  uint32_t t0;               // the launch's first token of the pass
  float scale;
  const float* sinks;        // [n_head] or null
  float* part;               // chunk states: [token][head group][split][heads * head_dim | heads maxima | heads sums]
  uint32_t* counters;        // [token][head group], 0 between launches
  float* out;                // [token][n_head][head_dim]
  OwnToken own;
};

// Floats of one chunk state (DecodeArgs::part) for HB heads of head_dim.
__host__ __device__ inline uint32_t decode_state_floats(uint32_t hb, uint32_t head_dim) { return hb * head_dim + 2 * hb; }

// T: lanes a position (a power of two >= head_dim / 8); HB: query heads a block.
template <uint32_t T, uint32_t HB, bool kOwn>
__global__ void __launch_bounds__(kDecodeWarps * 32) decode_attention_kernel(DecodeArgs a) {
  constexpr uint32_t W = kDecodeWarps, PPW = 32 / T, kSteps = kDecodeSteps;
  extern __shared__ float4 dattn_shared[];
  const uint32_t D = a.head_dim;
  float* qs = reinterpret_cast<float*>(dattn_shared);  // [HB][D]: the block's query heads
  float* wacc = qs + HB * D;                            // [W][HB][D]: each warp's weighted V
  float* wml = wacc + W * HB * D;                       // [W][HB][2]: each warp's maximum and sum
  const uint32_t token = a.t0 + blockIdx.z, pos = a.positions[token], slot = a.slots[token];  // both loads issued at once
  const uint32_t first = a.window && pos + 1 > a.window ? pos + 1 - a.window : 0;
  constexpr uint32_t kStep = W * PPW, kStride = kSteps * kStep;  // positions a block step, a warp's loads
  const DecodeSplit split = decode_split(pos + 1 - first, kDecodeMaxSplits, kDecodeChunk);
  if (blockIdx.x >= split.count) return;  // the token has fewer chunks than the grid
  const uint32_t nsub = (a.group + HB - 1) / HB, kvh = blockIdx.y / nsub, sub = blockIdx.y % nsub;
  const uint32_t h0 = kvh * a.group + sub * HB, nh = min(HB, a.group - sub * HB);
  const uint32_t begin = first + blockIdx.x * split.size, end = min(begin + split.size, pos + 1);
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, ps = lane / T, c = lane % T;
  const bool on = c * 8 < D;  // lanes past the head's width hold nothing
  const uint64_t slot_off = uint64_t(slot) * a.slot_stride, head_off = uint64_t(kvh) * D;
  const __half* kc = a.kc + slot_off + head_off;
  const __half* vc = a.vc + slot_off + head_off;
  float* qg = a.q + (uint64_t(token) * a.n_head + h0) * D;
  float* kf = wml + W * HB * 2;  // kOwn: the token's K head, then its K and V halves
  __half* kh = reinterpret_cast<__half*>(kf + D);
  __half* vh = kh + D;
  // A warp's positions, kSteps steps of PPW at a time (a lane group each): their K and V rows' 16 bytes
  // of this lane. Position pos (kOwn) comes from the shared halves once they are written (own_ready).
  auto load = [&](uint32_t wb, uint4(&kr)[kSteps], uint4(&vr)[kSteps], bool own_ready) {
#pragma unroll
    for (uint32_t j = 0; j < kSteps; ++j) {
      const uint32_t p = wb + j * kStep + ps;
      kr[j] = vr[j] = make_uint4(0, 0, 0, 0);
      if (p < end && on) {
        if (kOwn && p == pos) {
          if (own_ready) kr[j] = reinterpret_cast<const uint4*>(kh)[c], vr[j] = reinterpret_cast<const uint4*>(vh)[c];
        } else {
          kr[j] = __ldg(reinterpret_cast<const uint4*>(kc + uint64_t(p) * a.kv_dim) + c);
          vr[j] = __ldg(reinterpret_cast<const uint4*>(vc + uint64_t(p) * a.kv_dim) + c);
        }
      }
    }
  };
  const uint32_t wb0 = begin + warp * PPW;
  uint4 kr[kSteps], vr[kSteps];
  load(wb0, kr, vr, false);  // the first rows' loads before Q's: their latencies overlap
  if constexpr (kOwn) {
    const bool has_pos = blockIdx.x + 1 == split.count;
    for (uint32_t j = warp; j < nh + (has_pos ? 1u : 0u); j += W) {
      if (j < nh) {
        for (uint32_t i = lane; i < D; i += 32) qs[j * D + i] = qg[uint64_t(j) * D + i];
        __syncwarp();
        norm_rope_head(qs + j * D, a.own.q_norm, pos, a.own.r, lane);
      } else {
        const uint64_t kv_at = uint64_t(token) * a.kv_dim + head_off;
        for (uint32_t i = lane; i < D; i += 32) kf[i] = a.own.k[kv_at + i];
        __syncwarp();
        norm_rope_head(kf, a.own.k_norm, pos, a.own.r, lane);
        __syncwarp();
        const uint64_t at = slot_off + uint64_t(pos) * a.kv_dim + head_off;
        for (uint32_t i = lane; i < D; i += 32) {
          kh[i] = __float2half_rn(kf[i]);
          vh[i] = __float2half_rn(a.own.v[kv_at + i]);
          if (sub == 0) a.kc[at + i] = kh[i], a.vc[at + i] = vh[i];
        }
      }
    }
    for (uint32_t i = nh * D + threadIdx.x; i < HB * D; i += blockDim.x) qs[i] = 0.0f;
  } else {
    for (uint32_t i = threadIdx.x; i < HB * D; i += blockDim.x) qs[i] = i < nh * D ? qg[i] : 0.0f;
  }
  __syncthreads();
  if constexpr (kOwn) {  // position pos among the first rows: its halves are written now
#pragma unroll
    for (uint32_t j = 0; j < kSteps; ++j)
      if (on && wb0 + j * kStep + ps == pos && pos < end) kr[j] = reinterpret_cast<const uint4*>(kh)[c], vr[j] = reinterpret_cast<const uint4*>(vh)[c];
  }

  float m[HB], l[HB], acc[HB][8];
#pragma unroll
  for (uint32_t h = 0; h < HB; ++h) {
    m[h] = -INFINITY, l[h] = 0.0f;
#pragma unroll
    for (uint32_t e = 0; e < 8; ++e) acc[h][e] = 0.0f;
  }
  for (uint32_t wb = wb0; wb < end; wb += kStride) {
    uint4 nk[kSteps], nv[kSteps];  // the next rows' loads in flight during this step's arithmetic
    if (wb + kStride < end) load(wb + kStride, nk, nv, true);
    bool valid[kSteps];
#pragma unroll
    for (uint32_t j = 0; j < kSteps; ++j) valid[j] = wb + j * kStep + ps < end;
    float s[kSteps][HB];
#pragma unroll
    for (uint32_t h = 0; h < HB; ++h) {
      float qv[8];
      if (on) {
        const float4 q0 = reinterpret_cast<const float4*>(qs + h * D)[2 * c], q1 = reinterpret_cast<const float4*>(qs + h * D)[2 * c + 1];
        qv[0] = q0.x, qv[1] = q0.y, qv[2] = q0.z, qv[3] = q0.w, qv[4] = q1.x, qv[5] = q1.y, qv[6] = q1.z, qv[7] = q1.w;
      } else {
#pragma unroll
        for (uint32_t e = 0; e < 8; ++e) qv[e] = 0.0f;
      }
#pragma unroll
      for (uint32_t j = 0; j < kSteps; ++j) {
        const __half2* k2 = reinterpret_cast<const __half2*>(&kr[j]);
        float d = 0.0f;
#pragma unroll
        for (uint32_t e = 0; e < 4; ++e) {
          const float2 kf = __half22float2(k2[e]);
          d += qv[2 * e] * kf.x;
          d += qv[2 * e + 1] * kf.y;
        }
        s[j][h] = d;
      }
    }
#pragma unroll
    for (uint32_t o = T / 2; o > 0; o >>= 1)
#pragma unroll
      for (uint32_t j = 0; j < kSteps; ++j)
#pragma unroll
        for (uint32_t h = 0; h < HB; ++h) s[j][h] += __shfl_xor_sync(0xffffffffu, s[j][h], o);
#pragma unroll
    for (uint32_t h = 0; h < HB; ++h) {
      float mx = m[h];
#pragma unroll
      for (uint32_t j = 0; j < kSteps; ++j) {
        s[j][h] = valid[j] ? s[j][h] * a.scale : -INFINITY;
        mx = fmaxf(mx, s[j][h]);
      }
      if (mx == -INFINITY) continue;  // nothing seen yet (this lane group's positions all past the chunk)
      const float corr = expf(m[h] - mx);
      l[h] *= corr;
#pragma unroll
      for (uint32_t e = 0; e < 8; ++e) acc[h][e] *= corr;
#pragma unroll
      for (uint32_t j = 0; j < kSteps; ++j) {
        const float p = expf(s[j][h] - mx);
        l[h] += p;
        const __half2* v2 = reinterpret_cast<const __half2*>(&vr[j]);
#pragma unroll
        for (uint32_t e = 0; e < 4; ++e) {
          const float2 vf = __half22float2(v2[e]);
          acc[h][2 * e] += p * vf.x;
          acc[h][2 * e + 1] += p * vf.y;
        }
      }
      m[h] = mx;
    }
#pragma unroll
    for (uint32_t j = 0; j < kSteps; ++j) kr[j] = nk[j], vr[j] = nv[j];
  }
  // The warp's lane groups merged (group 0's lanes keep the result), then the warps' states to shared memory.
#pragma unroll
  for (uint32_t o = T; o < 32; o <<= 1)
#pragma unroll
    for (uint32_t h = 0; h < HB; ++h) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m[h], o), l2 = __shfl_xor_sync(0xffffffffu, l[h], o);
      float a2[8];
#pragma unroll
      for (uint32_t e = 0; e < 8; ++e) a2[e] = __shfl_xor_sync(0xffffffffu, acc[h][e], o);
      const float mx = fmaxf(m[h], m2);
      if (mx == -INFINITY) continue;
      const float fa = expf(m[h] - mx), fb = expf(m2 - mx);
      l[h] = l[h] * fa + l2 * fb;
#pragma unroll
      for (uint32_t e = 0; e < 8; ++e) acc[h][e] = acc[h][e] * fa + a2[e] * fb;
      m[h] = mx;
    }
  if (ps == 0) {
#pragma unroll
    for (uint32_t h = 0; h < HB; ++h) {
      if (on) {
        float4* w4 = reinterpret_cast<float4*>(wacc + (warp * HB + h) * D) + 2 * c;
        w4[0] = make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
        w4[1] = make_float4(acc[h][4], acc[h][5], acc[h][6], acc[h][7]);
      }
      if (c == 0) wml[(warp * HB + h) * 2] = m[h], wml[(warp * HB + h) * 2 + 1] = l[h];
    }
  }
  __syncthreads();

  // The chunk's state: the warps' merged in warp order.
  const float* sinks = a.sinks ? a.sinks + h0 : nullptr;
  float* out = a.out + (uint64_t(token) * a.n_head + h0) * D;
  const uint32_t state = decode_state_floats(HB, D);
  float* part = a.part + ((uint64_t(blockIdx.z) * gridDim.y + blockIdx.y) * kDecodeMaxSplits) * state;
  for (uint32_t i = threadIdx.x; i < nh * D; i += blockDim.x) {
    const uint32_t h = i / D;
    float mx = -INFINITY;
    for (uint32_t w = 0; w < W; ++w) mx = fmaxf(mx, wml[(w * HB + h) * 2]);
    float o = 0.0f, sum = 0.0f;
    for (uint32_t w = 0; w < W; ++w) {
      const float mw = wml[(w * HB + h) * 2];
      const float f = mw == -INFINITY ? 0.0f : expf(mw - mx);
      sum += wml[(w * HB + h) * 2 + 1] * f;
      o += wacc[(w * HB + h) * D + i % D] * f;
    }
    if (split.count == 1) {  // the only chunk: the token's output
      const float sink = sinks ? sinks[h] : -INFINITY, mt = with_sink_max(mx, sink), f = expf(mx - mt);
      out[i] = o * f / with_sink_sum(sum * f, sink, mt);
    } else {
      float* st = part + uint64_t(blockIdx.x) * state;
      st[i] = o;
      if (i % D == 0) st[HB * D + h] = mx, st[HB * D + HB + h] = sum;
    }
  }
  if (split.count > 1) {
    // The last block of the (token, head group) to get here merges the chunks.
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    uint32_t* counter = a.counters + uint64_t(blockIdx.z) * gridDim.y + blockIdx.y;
    if (threadIdx.x == 0) last = atomicAdd(counter, 1u) + 1 == split.count;
    __syncthreads();
    if (!last) return;
    __threadfence();
    // The chunks' maxima and sums, then each head's factors and denominator, in shared memory (the warps'
    // states are used up); then each output element's chunks, all loaded at once, added in chunk order.
    const uint32_t n = split.count;
    float *sm = wacc, *sl = sm + n * HB, *sf = sl + n * HB, *den = sf + n * HB;  // [split][HB] each, den [HB]
    for (uint32_t i = threadIdx.x; i < n * HB; i += blockDim.x) {
      const float* st = part + uint64_t(i / HB) * state + HB * D;
      sm[i] = __ldcg(st + i % HB);
      sl[i] = __ldcg(st + HB + i % HB);
    }
    __syncthreads();
    if (threadIdx.x < nh) {
      const uint32_t h = threadIdx.x;
      float mx = -INFINITY;
      for (uint32_t s = 0; s < n; ++s) mx = fmaxf(mx, sm[s * HB + h]);
      const float sink = sinks ? sinks[h] : -INFINITY;
      mx = with_sink_max(mx, sink);
      float sum = 0.0f;
      for (uint32_t s = 0; s < n; ++s) {
        const float ms = sm[s * HB + h], f = ms == -INFINITY ? 0.0f : expf(ms - mx);
        sf[s * HB + h] = f;
        sum += sl[s * HB + h] * f;
      }
      den[h] = with_sink_sum(sum, sink, mx);
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < nh * D; i += blockDim.x) {
      const uint32_t h = i / D;
      float v[kDecodeSplitCap];
#pragma unroll
      for (uint32_t s = 0; s < kDecodeSplitCap; ++s) v[s] = s < n ? __ldcg(part + uint64_t(s) * state + i) : 0.0f;
      float o = 0.0f;
#pragma unroll
      for (uint32_t s = 0; s < kDecodeSplitCap; ++s)
        if (s < n) o += v[s] * sf[s * HB + h];
      out[i] = o / den[h];
    }
    if (threadIdx.x == 0) *counter = 0;
  }
  if constexpr (kOwn) {  // every block of the group has read Q: it goes back rotated
    for (uint32_t i = threadIdx.x; i < nh * D; i += blockDim.x) qg[i] = qs[i];
  }
}

// Whether decode_attention takes heads of this size (else the caller keeps the per-head kernel).
inline bool decode_attention_fits(uint32_t head_dim) { return head_dim % 8 == 0 && head_dim >= 32 && head_dim <= kDecodeMaxHeadDim; }

// Query heads a block for a GQA group: a power of two up to kDecodeMaxGroup.
inline uint32_t decode_heads_per_block(uint32_t group) {
  const uint32_t cap = kDecodeMaxGroup;
  uint32_t hb = 1;
  while (hb < group && hb < cap) hb *= 2;
  return hb;
}

// Floats of decode_attention's scratch (chunk states, then counters as uint32) for launches of up to
// kDecodeTokens tokens.
inline uint64_t decode_attention_floats(uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim) {
  const uint32_t group = n_head / n_head_kv, hb = decode_heads_per_block(group), groups = n_head_kv * ((group + hb - 1) / hb);
  return uint64_t(kDecodeTokens) * groups * (uint64_t(kDecodeMaxSplits) * decode_state_floats(hb, head_dim) + 1);
}
inline uint64_t decode_counters_at(uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim) {
  const uint32_t group = n_head / n_head_kv, hb = decode_heads_per_block(group), groups = n_head_kv * ((group + hb - 1) / hb);
  return uint64_t(kDecodeTokens) * groups * kDecodeMaxSplits * decode_state_floats(hb, head_dim);
}

// `tokens` (1..kDecodeTokens) tokens from a.t0 on; a.part: decode_attention_floats floats, whose
// counters (from decode_counters_at) are zero. kOwn: one token (a.t0 = 0).
template <bool kOwn>
void decode_attention(cudaStream_t s, DecodeArgs a, uint32_t n_head_kv, uint32_t tokens) {
  const uint32_t D = a.head_dim, hb = decode_heads_per_block(a.group), groups = n_head_kv * ((a.group + hb - 1) / hb);
  a.counters = reinterpret_cast<uint32_t*>(a.part + decode_counters_at(n_head_kv * a.group, n_head_kv, D));
  const uint32_t shared =
      (hb * D + kDecodeWarps * hb * D + kDecodeWarps * hb * 2 + (kOwn ? 2 * D : 0)) * uint32_t(sizeof(float));
  const dim3 grid(kDecodeMaxSplits, groups, tokens);
  auto go = [&]<uint32_t T>() {
    switch (hb) {
      case 1: decode_attention_kernel<T, 1, kOwn><<<grid, kDecodeWarps * 32, shared, s>>>(a); break;
      case 2: decode_attention_kernel<T, 2, kOwn><<<grid, kDecodeWarps * 32, shared, s>>>(a); break;
      case 4: decode_attention_kernel<T, 4, kOwn><<<grid, kDecodeWarps * 32, shared, s>>>(a); break;
      default: decode_attention_kernel<T, 8, kOwn><<<grid, kDecodeWarps * 32, shared, s>>>(a); break;
    }
  };
  if (D <= 64) go.template operator()<8>();
  else if (D <= 128) go.template operator()<16>();
  else go.template operator()<32>();
}

}  // namespace gpunvme::llm::gpu
