#include "examples/llm/compute/gpu_moe_grouped.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "device/cuda_check.h"
#include "examples/llm/compute/gpu_moe_group.h"
#include "examples/llm/compute/gpu_route.h"

namespace gpunvme::llm {
namespace {

template <class T>
T* device_array(uint64_t count, uint64_t& total) {
  void* p = nullptr;
  device::check_cuda(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc for the grouped MoE");
  total += count * sizeof(T);
  return static_cast<T*>(p);
}

// xs[r] = xn[rows[r]]: row r of the grouped inputs is a copy of the token it serves.
__global__ void gather_rows_kernel(float* xs, const float* xn, const uint32_t* rows, uint32_t width) {
  const float* src = xn + uint64_t(rows[blockIdx.x]) * width;
  float* dst = xs + uint64_t(blockIdx.x) * width;
  for (uint32_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
}

// acc[t] = sum over j < k, in order, of weight[t][j] * y[pos[t][j]]: token t's experts' outputs weighted
// in its routing order, the token path's sum (weighted_sum_kernel) over rows found through pos.
__global__ void combine_kernel(float* acc, const float* y, const uint32_t* routes, const uint32_t* pos, uint32_t k,
                               uint32_t width) {
  const uint32_t t = blockIdx.y;
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= width) return;
  const float* weight = reinterpret_cast<const float*>(routes + uint64_t(t) * 2 * k + k);
  float a = 0.0f;
  for (uint32_t j = 0; j < k; ++j) a = a + weight[j] * y[uint64_t(pos[uint64_t(t) * k + j]) * width + i];
  acc[uint64_t(t) * width + i] = a;
}

// y[r][i] += bias[i] for r < count: one expert's bias row on each of its rows, after the product, as the
// token path's expert_bias_kernel adds it.
__global__ void add_bias_rows_kernel(float* y, const float* bias, uint32_t width) {
  float* row = y + uint64_t(blockIdx.x) * width;
  for (uint32_t i = threadIdx.x; i < width; i += blockDim.x) row[i] += bias[i];
}

// Rows [r0, r0 + count) of y = expert e's matrix (at w: of m's type and shape) times rows of x, then
// expert e's bias row where the stack has biases: the small passes' batched kernel, 8-bit x or FP32 by
// type as gpu_matmul chooses (see the header).
void expert_product(cudaStream_t s, const GpuMatrix& m, const uint8_t* w, const float* bias, uint32_t e, const float* x,
                    uint64_t r0, uint32_t count, float* y) {
  GpuMatrix me = m;
  me.w = w;
  float* out = y + r0 * m.rows;
  gpu_matmul(reinterpret_cast<gpu_stream_t>(s), me, x + r0 * m.cols, count, nullptr, out);
  if (bias) add_bias_rows_kernel<<<count, 256, 0, s>>>(out, bias + uint64_t(e) * m.rows, m.rows);
}

// The fetched experts' parts, each copied from the scratchpad to stage + j * per + at[p] (p: gate, up,
// down; bytes[p] long), block (j, p); failed[j] = 1 where the expert's read failed or a part is missing
// (the products then read whatever the stage holds, and poison_rows_kernel makes its rows NaN, as the
// token path's fetched kernel does).
struct StageParts {
  uint64_t at[3], bytes[3];
};
__global__ void stage_fetched_kernel(const uint8_t* scratch, const stream::GpuFetchedExpert* ex, const uint32_t* selection,
                                     StageParts parts, uint64_t per, uint8_t* stage, uint32_t* failed) {
  const uint32_t j = blockIdx.x, p = blockIdx.y;
  const stream::GpuFetchedExpert& e = ex[selection[j]];
  const uint32_t proj = uint32_t(p == 0 ? model::Projection::kGate : p == 1 ? model::Projection::kUp : model::Projection::kDown);
  const uint64_t n = parts.bytes[p];
  const uint64_t off = stream::find_part(e, proj, n);
  if (off == stream::kNoPart || e.failed != 0) {
    if (threadIdx.x == 0) failed[j] = 1;
    return;
  }
  const uint8_t* src = scratch + off;
  uint8_t* dst = stage + j * per + parts.at[p];
  if ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | n) % 16 == 0) {
    for (uint64_t i = threadIdx.x; i < n / 16; i += blockDim.x)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else {
    for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
  }
}

// Rows [0, gridDim.x) of y (width floats each) = NaN where *failed.
__global__ void poison_rows_kernel(float* y, uint32_t width, const uint32_t* failed) {
  if (*failed == 0) return;
  float* row = y + uint64_t(blockIdx.x) * width;
  for (uint32_t i = threadIdx.x; i < width; i += blockDim.x) row[i] = NAN;
}

uint64_t align_up(uint64_t n) { return (n + 255) / 256 * 256; }

// The fewest tokens of a small group (several sequences' decode) whose fetched experts go grouped, on
// the small-pass kernels; 0: never. Measured (llm_seqs, Qwen3-30B-A3B at 8 GiB, pcie4, H200): grouped, 2
// sequences made 5.3 passes/s against the token path's 6.3 (whose expert cache still hit), 4 made 5.1
// against 4.8, 16 made 4.3 against 2.0. So from 4 tokens by default; GPUNVME_MOE_GROUP_FETCHED=1: from
// 2, =0: never (the A/B switch).
uint32_t group_fetched_min_tokens() {
  const char* v = std::getenv("GPUNVME_MOE_GROUP_FETCHED");
  if (v && std::strcmp(v, "0") == 0) return 0;
  return v && std::strcmp(v, "1") == 0 ? 2 : 4;
}

// GPUNVME_MOE_MMA=0 keeps prompt passes' experts on the small-pass kernels (the A/B switch, until measured).
bool mma_enabled() {
  const char* v = std::getenv("GPUNVME_MOE_MMA");
  return !v || std::strcmp(v, "0") != 0;
}

// Expert e's projection of the layer (its stack in st, or its part in src's scratchpad).
ExpertWeights expert_weights(const GpuMatrix& m, ExpertSource* src, model::Projection proj) {
  ExpertWeights w{m.type, m.row_bytes, m.rows, m.cols, m.w, m.mat_bytes};
  if (src) w.w = nullptr, w.scratch = src->scratch(), w.ex = src->experts(), w.selection = src->selection(), w.proj = uint32_t(proj);
  return w;
}

// Before the products read projection `proj` of the last fetch's experts 0..count: its waits, slice by slice.
void wait_fetched(ExpertSource& src, uint32_t count, model::Projection proj, gpu_stream_t s) {
  const uint32_t slices = src.part_slices(proj);
  for (uint32_t k = 0; k < count; ++k)
    for (uint32_t i = 0; i < slices; ++i) src.wait_slice(k, proj, i, s);
}

}  // namespace

uint32_t GroupedMoe::fetched_min_tokens() { return group_fetched_min_tokens(); }

// Marks 0..6 of a device-grouped run: start, routed, grouped (rows gathered, inputs in 16-bit), gate and
// up, GLU (its outputs in 16-bit), down, combined. The run waits for its last mark and adds each phase.
struct GroupedMoe::PhaseEvents {
  static constexpr uint32_t kMarks = 7;
  static constexpr const char* kNames[kMarks - 1] = {"routing", "grouping+inputs", "gate+up", "GLU+inputs", "down", "combine"};
  cudaEvent_t ev[kMarks] = {};
  double ms[kMarks - 1] = {};
  uint32_t runs = 0, tokens = 0;
  PhaseEvents() {
    for (cudaEvent_t& e : ev) device::check_cuda(cudaEventCreate(&e), "grouped MoE events");
  }
  ~PhaseEvents() {
    std::fprintf(stderr, "grouped MoE events: %u runs, %u tokens; ms:", runs, tokens);
    double total = 0;
    for (uint32_t i = 0; i + 1 < kMarks; ++i) std::fprintf(stderr, " %s %.3f", kNames[i], ms[i]), total += ms[i];
    std::fprintf(stderr, "; total %.3f\n", total);
    for (cudaEvent_t e : ev) cudaEventDestroy(e);
  }
  void finish(uint32_t n) {
    device::check_cuda(cudaEventSynchronize(ev[kMarks - 1]), "grouped MoE events");
    for (uint32_t i = 0; i + 1 < kMarks; ++i) {
      float t = 0;
      device::check_cuda(cudaEventElapsedTime(&t, ev[i], ev[i + 1]), "grouped MoE events");
      ms[i] += t;
    }
    ++runs, tokens += n;
  }
};

void GroupedMoe::mark(uint32_t phase, gpu_stream_t s) {
  if (events_) device::check_cuda(cudaEventRecord(events_->ev[phase], reinterpret_cast<cudaStream_t>(s)), "grouped MoE events");
}

GroupedMoe::GroupedMoe(const ModelConfig& c, uint32_t max_tokens, bool fast_prompt)
    : c_(c), max_tokens_(max_tokens), tensor_(fast_prompt && mma_enabled()), fetched_small_min_(group_fetched_min_tokens()),
      first_(c.n_expert), count_(c.n_expert) {
  if (!c.is_moe()) throw std::logic_error("GroupedMoe: not an MoE model");
  const uint64_t B = max_tokens, K = c.n_expert_used;
  uint64_t& t = device_bytes_;
  logits_ = device_array<float>(B * c.n_expert, t);
  routes_ = device_array<uint32_t>(B * 2 * K, t);
  rows_ = device_array<uint32_t>(2 * B * K, t);
  pos_ = rows_ + B * K;
  xs_ = device_array<float>(B * K * c.n_embd, t);
  g_ = device_array<float>(B * K * c.n_ff, t);
  u_ = device_array<float>(B * K * c.n_ff, t);
  device::check_cuda(cudaMallocHost(&routes_host_, B * 2 * K * sizeof(uint32_t)), "cudaMallocHost for the grouped MoE");
  device::check_cuda(cudaMallocHost(&rows_host_, 2 * B * K * sizeof(uint32_t)), "cudaMallocHost for the grouped MoE");
  used_ = device_array<uint32_t>(c.n_expert, t);
  failed_ = device_array<uint32_t>(K, t);
  device::check_cuda(cudaMallocHost(&used_host_, c.n_expert * sizeof(uint32_t)), "cudaMallocHost for the grouped MoE");
  if (!tensor_) return;
  if (const char* v = std::getenv("GPUNVME_MOE_EVENTS"); v && std::strcmp(v, "1") == 0) events_ = std::make_unique<PhaseEvents>();
  // Each used expert's tokens in tiles: at most one partial tile per expert beside the full ones.
  max_tiles_ = uint32_t(B * K / kExpertTileTokens + std::min<uint64_t>(c.n_expert, B * K));
  xh_in_ = device_array<uint16_t>(B * K * c.n_embd, t);
  xh_mid_ = device_array<uint16_t>(B * K * c.n_ff, t);
  scale_in_ = device_array<float>(B * K, t);
  scale_mid_ = device_array<float>(B * K, t);
  tiles_ = device_array<ExpertTile>(max_tiles_, t);
  device::check_cuda(cudaMallocHost(&tiles_host_, max_tiles_ * sizeof(ExpertTile)), "cudaMallocHost for the grouped MoE");
}

GroupedMoe::~GroupedMoe() {
  for (void* p : {(void*)logits_, (void*)routes_, (void*)rows_, (void*)xs_, (void*)g_, (void*)u_, xh_in_, xh_mid_,
                  (void*)scale_in_, (void*)scale_mid_, (void*)tiles_, (void*)used_, (void*)failed_, (void*)stage_})
    cudaFree(p);
  for (void* p : {(void*)routes_host_, (void*)rows_host_, (void*)tiles_host_, (void*)used_host_}) cudaFreeHost(p);
}

void GroupedMoe::group(uint32_t n, std::span<const uint32_t> first) {
  const uint32_t K = c_.n_expert_used;
  std::fill(count_.begin(), count_.end(), 0u);
  for (uint32_t t = 0; t < n; ++t)
    for (uint32_t j = 0; j < K; ++j) {
      const uint32_t e = routes_host_[uint64_t(t) * 2 * K + j];
      if (e >= c_.n_expert) throw std::runtime_error("grouped MoE: the routing chose expert " + std::to_string(e) + " of " + std::to_string(c_.n_expert));
      ++count_[e];
    }
  // The used experts in fetch order: `first`'s (used, once each) then the rest by id; each one's rows
  // after the previous one's, so that a fetched group of K consecutive ones has consecutive rows.
  order_.clear();
  for (uint32_t e : first)
    if (e < c_.n_expert && count_[e] && std::find(order_.begin(), order_.end(), e) == order_.end()) order_.push_back(e);
  const size_t predicted = order_.size();
  for (uint32_t e = 0; e < c_.n_expert; ++e)
    if (count_[e] && std::find(order_.begin(), order_.begin() + predicted, e) == order_.begin() + predicted) order_.push_back(e);
  uint32_t next = 0;
  for (uint32_t e : order_) first_[e] = next, next += count_[e];
  uint32_t* rows = rows_host_;
  uint32_t* pos = rows_host_ + uint64_t(max_tokens_) * K;
  std::vector<uint32_t> fill(first_);
  for (uint32_t t = 0; t < n; ++t)
    for (uint32_t j = 0; j < K; ++j) {
      const uint32_t r = fill[routes_host_[uint64_t(t) * 2 * K + j]]++;
      rows[r] = t;
      pos[uint64_t(t) * K + j] = r;
    }
  // The used experts in that order, each one's tiles after the previous one's; a fetched group of K
  // used experts finds its expert i at routing index i % K (slot).
  used_n_ = 0;
  tiles_of_.clear();
  uint32_t tiles = 0;
  for (uint32_t e : order_) {
    tiles_of_.push_back(tiles);
    for (uint32_t r = 0; r < count_[e] && tensor_; r += kExpertTileTokens)
      tiles_host_[tiles++] = {e, used_n_ % K, first_[e] + r, std::min(kExpertTileTokens, count_[e] - r)};
    used_host_[used_n_++] = e;
  }
  tiles_of_.push_back(tiles);
}

// Used experts [i0, i1) at a time: the whole pass's at once when resident; K at a time when fetched, each
// group read into the scratchpad before its products and the next group's fetch after them. on_device
// (resident only): grouped by gpu_group_by_expert, whose counts the host does not know.
void GroupedMoe::run_tensor(gpu_stream_t gs, const ExpertStacks& st, uint32_t rows, ExpertSource* src, uint32_t layer,
                            bool on_device) {
  using model::Projection;
  const uint32_t E = c_.n_embd, F = c_.n_ff, K = c_.n_expert_used;
  gpu_gemm_inputs(gs, gemm_elem_for(st.gate.type), xs_, rows, E, xh_in_, scale_in_);
  uint16_t* mid = static_cast<uint16_t*>(xh_mid_);
  // Grouped on the device (resident experts only): one group of every row, over the bound's tiles.
  const uint32_t groups = on_device ? 1 : used_n_;
  for (uint32_t i0 = 0; i0 < groups; i0 += src ? K : groups) {
    const uint32_t i1 = src ? std::min(used_n_, i0 + K) : groups;
    const ExpertTile* tiles = on_device ? tiles_ : tiles_ + tiles_of_[i0];
    const uint32_t n_tiles = on_device ? expert_tiles_bound(rows, c_.n_expert) : tiles_of_[i1] - tiles_of_[i0];
    const uint32_t r0 = on_device ? 0 : first_[used_host_[i0]];
    const uint32_t r1 = on_device ? rows : first_[used_host_[i1 - 1]] + count_[used_host_[i1 - 1]];
    if (src) {
      src->fetch(layer, used_ + i0, i1 - i0, gs);
      wait_fetched(*src, i1 - i0, Projection::kGate, gs);
      wait_fetched(*src, i1 - i0, Projection::kUp, gs);
    }
    if (on_device) mark(2, gs);
    gpu_expert_products(gs, expert_weights(st.gate, src, Projection::kGate), tiles, n_tiles, xh_in_, scale_in_, st.gate_bias, g_);
    gpu_expert_products(gs, expert_weights(st.up, src, Projection::kUp), tiles, n_tiles, xh_in_, scale_in_, st.up_bias, u_);
    if (on_device) mark(3, gs);
    gpu_glu(gs, g_ + uint64_t(r0) * F, u_ + uint64_t(r0) * F, uint32_t(uint64_t(r1 - r0) * F), c_.act);
    gpu_gemm_inputs(gs, gemm_elem_for(st.down.type), g_ + uint64_t(r0) * F, r1 - r0, F, mid + uint64_t(r0) * F, scale_mid_ + r0);
    if (on_device) mark(4, gs);
    if (src) wait_fetched(*src, i1 - i0, Projection::kDown, gs);
    gpu_expert_products(gs, expert_weights(st.down, src, Projection::kDown), tiles, n_tiles, mid, scale_mid_, st.down_bias, xs_);
    if (on_device) mark(5, gs);
    if (src) src->consumed(layer, gs);
  }
}

// The small-pass kernels (8-bit x or FP32 by type, gpu_matmul's choice) over fetched experts, K at a
// time: each group's parts copied from the scratchpad to the stage (a few MB, microseconds), where the
// batched kernel reads them as it reads a resident stack: the same bytes through the same kernel, so the
// resident grouped path's bits, which are the token path's.
void GroupedMoe::run_fetched_small(gpu_stream_t gs, const ExpertStacks& st, ExpertSource& src, uint32_t layer,
                                   const std::function<void()>& after_fetches) {
  using model::Projection;
  cudaStream_t s = reinterpret_cast<cudaStream_t>(gs);
  const uint32_t F = c_.n_ff, K = c_.n_expert_used;
  StageParts parts{{0, align_up(st.gate.mat_bytes), align_up(st.gate.mat_bytes) + align_up(st.up.mat_bytes)},
                   {st.gate.mat_bytes, st.up.mat_bytes, st.down.mat_bytes}};
  const uint64_t per = parts.at[2] + align_up(st.down.mat_bytes);
  if (stage_bytes_ < per * K) {  // once per model: the first pass that needs it
    device::check_cuda(cudaStreamSynchronize(s), "grouped MoE stage");
    cudaFree(stage_);
    stage_ = nullptr;
    stage_bytes_ = 0;
    uint64_t t = 0;
    stage_ = device_array<uint8_t>(per * K, t);
    stage_bytes_ = per * K;
    device_bytes_ += t;
  }
  for (uint32_t i0 = 0; i0 < used_n_; i0 += K) {
    const uint32_t i1 = std::min(used_n_, i0 + K), cnt = i1 - i0;
    const uint32_t r0 = first_[used_host_[i0]], r1 = first_[used_host_[i1 - 1]] + count_[used_host_[i1 - 1]];
    src.fetch(layer, used_ + i0, cnt, gs);
    if (i1 == used_n_ && after_fetches) after_fetches();  // the layer's last fetch: its reads go first
    for (Projection p : {Projection::kGate, Projection::kUp, Projection::kDown}) wait_fetched(src, cnt, p, gs);
    device::check_cuda(cudaMemsetAsync(failed_, 0, cnt * sizeof(uint32_t), s), "grouped MoE stage");
    stage_fetched_kernel<<<dim3(cnt, 3), 256, 0, s>>>(src.scratch(), src.experts(), src.selection(), parts, per, stage_, failed_);
    for (uint32_t j = 0; j < cnt; ++j) {
      const uint32_t e = used_host_[i0 + j];
      const uint8_t* w = stage_ + uint64_t(j) * per;
      expert_product(s, st.gate, w + parts.at[0], st.gate_bias, e, xs_, first_[e], count_[e], g_);
      expert_product(s, st.up, w + parts.at[1], st.up_bias, e, xs_, first_[e], count_[e], u_);
    }
    gpu_glu(gs, g_ + uint64_t(r0) * F, u_ + uint64_t(r0) * F, uint32_t(uint64_t(r1 - r0) * F), c_.act);
    for (uint32_t j = 0; j < cnt; ++j) {  // the outputs over this group's inputs, which no product reads any more
      const uint32_t e = used_host_[i0 + j];
      expert_product(s, st.down, stage_ + uint64_t(j) * per + parts.at[2], st.down_bias, e, g_, first_[e], count_[e], xs_);
      poison_rows_kernel<<<count_[e], 256, 0, s>>>(xs_ + uint64_t(first_[e]) * c_.n_embd, c_.n_embd, failed_ + j);
    }
    src.consumed(layer, gs);
  }
}

void GroupedMoe::run(gpu_stream_t gs, const ExpertStacks& st, const float* xn, uint32_t n, float* acc, ExpertSource* src,
                     uint32_t layer, bool fast, std::span<const uint32_t> first, const std::function<void()>& after_fetches) {
  if (n == 0 || n > max_tokens_) throw std::logic_error("GroupedMoe::run: " + std::to_string(n) + " tokens, sized for " + std::to_string(max_tokens_));
  const bool tensor = fast && tensor_cores(st.gate.type, st.up.type);
  if (src && !tensor && fetched_small_min_ == 0)
    throw std::logic_error("GroupedMoe::run: fetched experts go grouped on the tensor cores, or on the small-pass kernels unless GPUNVME_MOE_GROUP_FETCHED=0");
  cudaStream_t s = reinterpret_cast<cudaStream_t>(gs);
  const uint32_t E = c_.n_embd, F = c_.n_ff, K = c_.n_expert_used;
  const uint64_t rows = uint64_t(n) * K;
  // Routing: the router's product for every token (the matrix-vector kernel's bits, its bias inside as
  // there), the top k.
  const bool on_device = tensor && !src && gpu_groups(c_.n_expert);  // resident on the tensor cores: grouped on the device, no wait
  if (on_device) mark(0, gs);
  gpu_matmul(gs, st.router, xn, n, st.router_bias, logits_);
  gpu_route_tokens(gs, logits_, n, c_.n_expert, K, routes_, c_.gating);
  if (on_device) {
    mark(1, gs);
    gpu_group_by_expert(gs, routes_, n, K, c_.n_expert, rows_, pos_, tiles_, max_tiles_, used_);
    gather_rows_kernel<<<uint32_t(rows), 256, 0, s>>>(xs_, xn, rows_, E);
    run_tensor(gs, st, uint32_t(rows), nullptr, layer, true);
    combine_kernel<<<dim3((E + 127) / 128, n), 128, 0, s>>>(acc, xs_, routes_, pos_, K, E);
    device::check_cuda(cudaGetLastError(), "grouped MoE kernels");
    mark(6, gs);
    if (events_) events_->finish(n);
    return;
  }
  device::check_cuda(cudaMemcpyAsync(routes_host_, routes_, rows * 2 * sizeof(uint32_t), cudaMemcpyDeviceToHost, s), "grouped MoE routing copy");
  device::check_cuda(cudaStreamSynchronize(s), "grouped MoE routing");
  group(n, src && !tensor ? first : std::span<const uint32_t>{});  // the tensor cores' passes keep the order of id
  device::check_cuda(cudaMemcpyAsync(rows_, rows_host_, rows * sizeof(uint32_t), cudaMemcpyHostToDevice, s), "grouped MoE rows");
  device::check_cuda(cudaMemcpyAsync(pos_, rows_host_ + uint64_t(max_tokens_) * K, rows * sizeof(uint32_t), cudaMemcpyHostToDevice, s),
                     "grouped MoE positions");
  device::check_cuda(cudaMemcpyAsync(used_, used_host_, used_n_ * sizeof(uint32_t), cudaMemcpyHostToDevice, s), "grouped MoE experts");
  gather_rows_kernel<<<uint32_t(rows), 256, 0, s>>>(xs_, xn, rows_, E);
  if (tensor) {
    device::check_cuda(cudaMemcpyAsync(tiles_, tiles_host_, tiles_of_.back() * sizeof(ExpertTile), cudaMemcpyHostToDevice, s),
                       "grouped MoE tiles");
    run_tensor(gs, st, uint32_t(rows), src, layer, false);
  } else if (src) {
    run_fetched_small(gs, st, *src, layer, after_fetches);
  } else {
    for (uint32_t e = 0; e < c_.n_expert; ++e) {
      if (!count_[e]) continue;
      expert_product(s, st.gate, st.gate.w + e * st.gate.mat_bytes, st.gate_bias, e, xs_, first_[e], count_[e], g_);
      expert_product(s, st.up, st.up.w + e * st.up.mat_bytes, st.up_bias, e, xs_, first_[e], count_[e], u_);
    }
    gpu_glu(gs, g_, u_, uint32_t(rows * F), c_.act);
    for (uint32_t e = 0; e < c_.n_expert; ++e)  // the outputs over the inputs, which no product reads any more
      if (count_[e]) expert_product(s, st.down, st.down.w + e * st.down.mat_bytes, st.down_bias, e, g_, first_[e], count_[e], xs_);
  }
  combine_kernel<<<dim3((E + 127) / 128, n), 128, 0, s>>>(acc, xs_, routes_, pos_, K, E);
  device::check_cuda(cudaGetLastError(), "grouped MoE kernels");
}

}  // namespace gpunvme::llm
