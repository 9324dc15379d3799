// nvme_perf's GPU path: one warp per queue drives device::warp_pump with its own make/done lambdas.
//
//   make(i)   command n = base + i of the warp: LBA and read/write from IoPattern (counter-based, so
//             any lane computes any n), data slot (cid % slots) of the queue's region of a GPU-mapped
//             DMA buffer, PRPs on the GPU, %globaltimer submit time stored per command id.
//   done()    latency = %globaltimer now - submit time of that id, into a per-warp shared-memory
//             histogram (nvme_perf_math.h buckets); --verify checks the read data's block stamps.
//   bound     warp_pump runs to completion of its count, so the warp calls it in chunks sized to
//             ~10 ms each (from the measured rate) and stops issuing once --time has passed on
//             %globaltimer; in-flight commands then drain (counted). --count: chunks up to the count.
//   progress  after every chunk lane 0 writes its completed count to pinned host memory: the host
//             polls it (1 ms sleeps, ~0 host CPU) and gives up on a kernel that stops progressing.
#include <cuda_runtime.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "bench/nvme_perf.h"
#include "device/queue_set.h"
#include "device/warp_queue.cuh"
#include "host/cuda_device.h"
#include "host/dma_memory.h"
#include "host/error.h"

namespace gpunvme::perf {
namespace {

using device::check_cuda;

struct QueueOut {
  uint64_t submitted, completed, failed, reads, writes;
  uint64_t lat_count, lat_sum_ns, lat_max_ns;
  uint64_t t_start, t_end, chunks;
  uint64_t verify_bad, first_bad_lba, first_bad_got;
  uint64_t untimed;          // successful completions whose submit time was missing (not in the histogram)
  uint32_t faults, bad_prps;
  uint16_t first_error_status, qid;
  uint32_t first_error_tag;
  uint32_t ran;              // kRanMarker once the kernel wrote this record: zeros are not results
};
inline constexpr uint32_t kRanMarker = 0x52414e31;  // "RAN1"

struct KernelArgs {
  IoPattern pat;
  device::DeviceBuffer buf;
  uint64_t slot_bytes;       // = bs
  uint32_t buf_slots;        // per queue, power of two
  uint32_t depth;
  uint64_t duration_ns;      // used when per_queue == 0
  uint64_t per_queue;
  uint64_t timeout_ns;
  uint32_t verify;
  uint32_t lba_bytes;
  uint32_t cid_stride;       // entries per queue in cid_time / cid_lba (>= cid_count)
  uint64_t* cid_time;        // submit %globaltimer per command id
  uint64_t* cid_lba;         // LBA per command id, bit 63 set for writes
  unsigned long long* hist;  // [nq][kBuckets]
  QueueOut* out;             // [nq]
  volatile uint64_t* progress;  // [nq], host-mapped: completed so far; ~0 when the warp has finished
};

constexpr uint64_t kWriteBit = 1ull << 63;
constexpr uint64_t kDone = ~0ull;

__device__ __forceinline__ uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }
__device__ __forceinline__ uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }
__device__ __forceinline__ uint64_t warp_sum(uint64_t v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(device::kFullMask, v, d);
  return v;
}
__device__ __forceinline__ uint64_t warp_max(uint64_t v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = max64(v, __shfl_xor_sync(device::kFullMask, v, d));
  return v;
}
__device__ __forceinline__ uint64_t timer0() {  // lane 0's %globaltimer, on every lane
  uint64_t t = 0;
  if (device::lane_id() == 0) t = device::global_timer_ns();
  return __shfl_sync(device::kFullMask, t, 0);
}

__global__ void __launch_bounds__(32) perf_kernel(device::DeviceQueue* qs, uint32_t nq, KernelArgs a) {
  __shared__ unsigned long long h[hist::kBuckets];
  const uint32_t w = blockIdx.x;
  const uint32_t lane = device::lane_id();
  if (w >= nq || blockDim.x != 32) return;
  for (uint32_t b = lane; b < hist::kBuckets; b += 32) h[b] = 0;
  __syncwarp();
  device::DeviceQueue* q = qs + w;
  const device::DeviceQueue qc = *q;  // the immutable fields
  uint64_t* const ctime = a.cid_time + uint64_t(w) * a.cid_stride;
  uint64_t* const clba = a.cid_lba + uint64_t(w) * a.cid_stride;
  const uint64_t bytes = a.slot_bytes;
  const uint32_t blocks = a.pat.blocks;
  uint8_t* const region = a.buf.gpu + uint64_t(w) * a.buf_slots * a.slot_bytes;
  const uint64_t region_off = uint64_t(w) * a.buf_slots * a.slot_bytes;

  // Per-lane tallies, summed over the warp at the end.
  uint64_t my_reads = 0, my_writes = 0, lat_n = 0, lat_sum = 0, lat_max = 0, bad = 0, bad_lba = 0, bad_got = 0;
  uint32_t bad_prps = 0;
  uint64_t untimed = 0;
  uint64_t base = 0;  // commands issued by earlier chunks

  auto make = [&](uint64_t i, uint16_t cid, uint32_t* tag) {
    const uint64_t n = base + i;
    const uint64_t lba = a.pat.lba(w, n);
    const bool rd = a.pat.is_read(w, n);
    const uint64_t slot = cid & (a.buf_slots - 1);
    if (!rd && a.verify) {
      uint8_t* p = region + slot * bytes;
      for (uint32_t k = 0; k < blocks; ++k) *reinterpret_cast<uint64_t*>(p + uint64_t(k) * a.lba_bytes) = stamp(lba + k);
    }
    nvme::PrpPair prp;
    if (!device::prps_for(qc, cid, a.buf, region_off + slot * bytes, bytes, &prp)) ++bad_prps;
    clba[cid] = lba | (rd ? 0 : kWriteBit);
    *tag = cid;
    if (rd) ++my_reads; else ++my_writes;
    ctime[cid] = device::global_timer_ns();
    return rd ? nvme::make_read(qc.nsid, lba, blocks, prp.prp1, prp.prp2)
              : nvme::make_write(qc.nsid, lba, blocks, prp.prp1, prp.prp2);
  };
  auto done = [&](uint32_t tag, nvme::Status st) {
    const uint64_t now = device::global_timer_ns();
    const uint32_t cid = tag;
    if (!st.ok() || cid >= a.cid_stride) return;
    const uint64_t t_sub = ctime[cid];
    if (t_sub == 0 || t_sub > now) {  // never expected: the id's submit time is not visible
      ++untimed;
      return;
    }
    const uint64_t lat = now - t_sub;
    atomicAdd(&h[hist::bucket(lat)], 1ull);
    ++lat_n;
    lat_sum += lat;
    lat_max = max64(lat_max, lat);
    if (a.verify) {
      const uint64_t meta = clba[cid];
      if (!(meta & kWriteBit)) {
        const uint64_t lba = meta;
        const uint8_t* p = region + (cid & (a.buf_slots - 1)) * bytes;
        const uint64_t first = *reinterpret_cast<const volatile uint64_t*>(p);
        const uint64_t last = *reinterpret_cast<const volatile uint64_t*>(p + uint64_t(blocks - 1) * a.lba_bytes);
        const bool ok_first = first == stamp(lba), ok_last = last == stamp(lba + blocks - 1);
        if (!ok_first || !ok_last) {
          if (bad == 0) {
            bad_lba = ok_first ? lba + blocks - 1 : lba;
            bad_got = ok_first ? last : first;
          }
          ++bad;
        }
      }
    }
  };

  const uint64_t t_start = timer0();
  uint64_t submitted = 0, completed = 0, failed = 0, chunks = 0;
  uint32_t faults = 0;
  uint16_t first_error_status = 0;
  uint32_t first_error_tag = 0;
  const uint64_t min_chunk = max64(2ull * a.depth, 64);
  uint64_t chunk = max64(4ull * a.depth, 256);
  for (;;) {
    uint64_t want = chunk;
    if (a.per_queue) want = min64(want, a.per_queue - base);
    if (want == 0) break;
    const uint64_t t_chunk = timer0();
    const device::QueueReport r = device::warp_pump(q, want, a.depth, a.timeout_ns, make, done);
    submitted += r.submitted;
    completed += r.completed;
    failed += r.failed;
    faults |= r.faults;
    if (r.failed && first_error_status == 0) {
      first_error_status = r.first_error_status;
      first_error_tag = r.first_error_tag;
    }
    base += r.submitted;
    ++chunks;
    if (lane == 0) {
      a.progress[w] = completed;
      __threadfence_system();
    }
    if (r.faults != 0 || r.submitted < want) break;
    const uint64_t now = timer0();
    if (a.per_queue == 0 && now - t_start >= a.duration_ns) break;
    // Next chunk: about 10 ms of commands at the rate just measured (a fiftieth of a short run).
    const double per_cmd = double(max64(now - t_chunk, 1)) / double(want);
    double target = 10e6;
    if (a.per_queue == 0) {
      target = fmin(target, double(a.duration_ns) / 50.0);
      const double left = double(t_start + a.duration_ns - now);
      target = fmin(target, left);
    }
    const double next = target / per_cmd;
    chunk = next < double(min_chunk) ? min_chunk : next > double(1ull << 26) ? (1ull << 26) : uint64_t(next);
  }
  const uint64_t t_end = timer0();
  __syncwarp();
  for (uint32_t b = lane; b < hist::kBuckets; b += 32) a.hist[uint64_t(w) * hist::kBuckets + b] = h[b];
  const uint64_t s_reads = warp_sum(my_reads), s_writes = warp_sum(my_writes), s_n = warp_sum(lat_n),
                 s_sum = warp_sum(lat_sum), s_max = warp_max(lat_max), s_bad = warp_sum(bad),
                 s_prps = warp_sum(bad_prps), s_untimed = warp_sum(untimed);
  // The first verify failure of the lowest lane that saw one.
  const uint32_t bad_mask = __ballot_sync(device::kFullMask, bad != 0);
  const uint32_t src = bad_mask ? __ffs(bad_mask) - 1 : 0;
  const uint64_t f_lba = __shfl_sync(device::kFullMask, bad_lba, src);
  const uint64_t f_got = __shfl_sync(device::kFullMask, bad_got, src);
  if (lane == 0) {
    QueueOut o;
    o.submitted = submitted;
    o.completed = completed;
    o.failed = failed;
    o.reads = s_reads;
    o.writes = s_writes;
    o.lat_count = s_n;
    o.lat_sum_ns = s_sum;
    o.lat_max_ns = s_max;
    o.t_start = t_start;
    o.t_end = t_end;
    o.chunks = chunks;
    o.verify_bad = s_bad;
    o.first_bad_lba = f_lba;
    o.first_bad_got = f_got;
    o.faults = faults | (s_prps ? device::fault::kBadRequest : 0u);
    o.bad_prps = uint32_t(s_prps);
    o.untimed = s_untimed;
    o.first_error_status = first_error_status;
    o.qid = qc.qid;
    o.first_error_tag = first_error_tag;
    o.ran = kRanMarker;
    a.out[w] = o;
    __threadfence_system();
    a.progress[w] = kDone;
    __threadfence_system();
  }
}

template <class T>
struct DevMem {
  T* p = nullptr;
  explicit DevMem(size_t n) {
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&p), sizeof(T) * std::max<size_t>(n, 1)), "cudaMalloc");
    check_cuda(cudaMemset(p, 0, sizeof(T) * std::max<size_t>(n, 1)), "cudaMemset");
  }
  ~DevMem() { cudaFree(p); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
};

struct HostMapped {
  uint64_t* host = nullptr;
  uint64_t* dev = nullptr;
  explicit HostMapped(size_t n) {
    check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&host), 8 * std::max<size_t>(n, 1), cudaHostAllocMapped),
               "cudaHostAlloc(progress)");
    std::memset(host, 0, 8 * std::max<size_t>(n, 1));
    check_cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), host, 0), "cudaHostGetDevicePointer(progress)");
  }
  ~HostMapped() { cudaFreeHost(host); }
  HostMapped(const HostMapped&) = delete;
  HostMapped& operator=(const HostMapped&) = delete;
};

uint32_t pow2_at_least(uint64_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

// Everything one device needs on the GPU side.
struct Rig {
  const GpuDevice* dev = nullptr;
  std::unique_ptr<device::DeviceQueueSet> set;
  host::DmaBuffer buf;
  std::unique_ptr<device::DeviceBufferMap> map;
  std::unique_ptr<DevMem<uint64_t>> cid_time, cid_lba;
  std::unique_ptr<DevMem<unsigned long long>> hist;
  std::unique_ptr<DevMem<QueueOut>> out;
  std::unique_ptr<HostMapped> progress;
  cudaStream_t stream = nullptr;
  KernelArgs args{};
  uint32_t nq = 0;
  ~Rig() {
    if (stream) cudaStreamDestroy(stream);
  }
};

}  // namespace

bool gpu_path_built() { return true; }

bool gpu_path_usable(std::string* why) { return host::cuda_device_available(why); }

void gpu_init() {
  std::string why;
  if (!host::cuda_device_available(&why))
    throw Error(ErrorKind::kUnsupported, "--path gpu needs a CUDA GPU: " + why);
  check_cuda(cudaFree(nullptr), "CUDA context creation");
}

std::vector<DeviceResult> run_gpu(const std::vector<GpuDevice>& devices, const Job& job,
                                  const std::function<void()>& on_start, const std::function<void()>& on_end) {
  std::vector<std::unique_ptr<Rig>> rigs;
  for (const GpuDevice& d : devices) {
    auto r = std::make_unique<Rig>();
    r->dev = &d;
    r->nq = uint32_t(d.queues.size());
    device::DeviceQueueOptions qo;
    qo.max_command_bytes = std::max<uint64_t>(job.bs, 4096);
    qo.doorbell = job.doorbell;
    r->set = std::make_unique<device::DeviceQueueSet>(*d.controller, d.queues, d.nsid, qo);
    const uint64_t max_bytes = uint64_t(r->set->max_blocks_per_command()) * r->set->lba_bytes();
    if (job.pattern.blocks > r->set->max_blocks_per_command())
      throw Error(ErrorKind::kInvalidArgument, d.name + ": --bs " + std::to_string(job.bs) +
                                                   " is more than one GPU command can move (" + std::to_string(max_bytes) +
                                                   " bytes: MDTS, and the 2 MiB PRP-list limit of device/)");
    uint32_t cid_count = 0;
    for (const device::DeviceQueue& q : r->set->snapshot()) cid_count = std::max(cid_count, q.cid_count);
    // Data slots per queue: one per command id in flight where the buffer cap allows (no two
    // commands in flight share a slot), else fewer, shared (data of concurrent reads may mix).
    uint32_t slots = std::min<uint32_t>(cid_count, pow2_at_least(std::max<uint32_t>(job.qd, 1)));
    if (job.verify) slots = cid_count;
    while (slots > 1 && uint64_t(r->nq) * slots * job.bs > job.buffer_cap_bytes) slots /= 2;
    if (job.verify && slots != cid_count)
      throw Error(ErrorKind::kInvalidArgument,
                  d.name + ": --verify needs a data slot per command id (" + std::to_string(cid_count) + " x " +
                      std::to_string(job.bs) + " bytes per queue), more than the buffer cap; use a smaller --qd or --bs");
    host::DmaOptions gm;
    gm.gpu_mapped = true;
    r->buf = host::DmaBuffer(d.controller->transport(), uint64_t(r->nq) * slots * job.bs, gm);
    std::memset(r->buf.host(), 0xA5, r->buf.size());
    r->map = std::make_unique<device::DeviceBufferMap>(r->buf, d.controller->page_bytes());
    r->cid_time = std::make_unique<DevMem<uint64_t>>(size_t(r->nq) * cid_count);
    r->cid_lba = std::make_unique<DevMem<uint64_t>>(size_t(r->nq) * cid_count);
    r->hist = std::make_unique<DevMem<unsigned long long>>(size_t(r->nq) * hist::kBuckets);
    r->out = std::make_unique<DevMem<QueueOut>>(r->nq);
    r->progress = std::make_unique<HostMapped>(r->nq);
    check_cuda(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    KernelArgs& a = r->args;
    a.pat = job.pattern;
    a.buf = r->map->get();
    a.slot_bytes = job.bs;
    a.buf_slots = slots;
    a.depth = job.qd;
    a.duration_ns = uint64_t(job.seconds * 1e9);
    a.per_queue = job.per_queue_count;
    a.timeout_ns = job.timeout_ns;
    a.verify = job.verify ? 1 : 0;
    a.lba_bytes = job.lba_bytes;
    a.cid_stride = cid_count;
    a.cid_time = r->cid_time->p;
    a.cid_lba = r->cid_lba->p;
    a.hist = r->hist->p;
    a.out = r->out->p;
    a.progress = r->progress->dev;
    rigs.push_back(std::move(r));
  }
  check_cuda(cudaDeviceSynchronize(), "set-up");

  on_start();
  for (auto& r : rigs) {
    perf_kernel<<<r->nq, 32, 0, r->stream>>>(r->set->device(), r->nq, r->args);
    check_cuda(cudaGetLastError(), "perf_kernel launch");
  }
  // Bounded wait: 1 ms sleeps (no host core spent), progress watched per queue.
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto stall = std::chrono::nanoseconds(job.timeout_ns) + std::chrono::seconds(10);
  const auto hard = job.per_queue_count ? std::chrono::nanoseconds::max() / 4
                                        : std::chrono::nanoseconds(uint64_t(job.seconds * 1e9)) + stall +
                                              std::chrono::seconds(20);
  std::vector<std::vector<uint64_t>> last(rigs.size());
  auto last_change = t0;
  for (;;) {
    bool all_done = true, changed = false;
    for (size_t k = 0; k < rigs.size(); ++k) {
      const cudaError_t e = cudaStreamQuery(rigs[k]->stream);
      if (e == cudaErrorNotReady) all_done = false;
      else check_cuda(e, ("perf_kernel on " + rigs[k]->dev->name).c_str());
      std::vector<uint64_t> now(rigs[k]->nq);
      for (uint32_t w = 0; w < rigs[k]->nq; ++w) now[w] = reinterpret_cast<volatile uint64_t*>(rigs[k]->progress->host)[w];
      if (now != last[k]) changed = true;
      last[k] = std::move(now);
    }
    if (all_done) break;
    const auto t = Clock::now();
    if (changed) last_change = t;
    if (t - last_change > stall || t - t0 > hard) {
      std::fprintf(stderr, "nvme_perf: error: GPU kernel made no progress for %.1f s (or ran %.1f s, past its bound); "
                           "completed commands per queue:\n",
                   std::chrono::duration<double>(t - last_change).count(), std::chrono::duration<double>(t - t0).count());
      for (size_t k = 0; k < rigs.size(); ++k) {
        std::fprintf(stderr, "  %s:", rigs[k]->dev->name.c_str());
        for (uint64_t v : last[k]) {
          if (v == kDone) std::fprintf(stderr, " done");
          else std::fprintf(stderr, " %llu", static_cast<unsigned long long>(v));
        }
        std::fprintf(stderr, "\n");
      }
      std::fprintf(stderr, "nvme_perf: a running kernel cannot be cancelled; exiting (status 3)\n");
      std::fflush(stderr);
      std::_Exit(3);
    }
    timespec ts{0, 1'000'000};
    nanosleep(&ts, nullptr);
  }
  on_end();

  std::vector<DeviceResult> results;
  for (auto& r : rigs) {
    std::vector<QueueOut> outs(r->nq);
    std::vector<unsigned long long> h(size_t(r->nq) * hist::kBuckets);
    check_cuda(cudaMemcpy(outs.data(), r->out->p, sizeof(QueueOut) * r->nq, cudaMemcpyDeviceToHost), "cudaMemcpy(results)");
    check_cuda(cudaMemcpy(h.data(), r->hist->p, 8 * h.size(), cudaMemcpyDeviceToHost), "cudaMemcpy(histogram)");
    for (uint32_t w = 0; w < r->nq; ++w)
      if (outs[w].ran != kRanMarker)
        throw Error(ErrorKind::kIo, "perf_kernel never wrote the results of queue " + std::to_string(w) + " on " +
                                        r->dev->name + ": the kernel did not run; no figures");
    DeviceResult d;
    d.device = r->dev->name;
    d.doorbell = device::doorbell_mode_name(r->set->doorbell_mode());
    d.doorbell_note = r->set->doorbell_note();
    d.buffer_slots = r->args.buf_slots;
    d.t_start_ns = ~0ull;
    uint32_t faults = 0;
    uint64_t submitted = 0, completed = 0;
    for (uint32_t w = 0; w < r->nq; ++w) {
      const QueueOut& o = outs[w];
      submitted += o.submitted;
      completed += o.completed;
      d.ios += o.completed - o.failed;
      d.errors += o.failed;
      d.reads += o.reads;
      d.writes += o.writes;
      d.lat_count += o.lat_count;
      d.lat_sum_ns += o.lat_sum_ns;
      d.lat_max_ns = std::max(d.lat_max_ns, o.lat_max_ns);
      d.t_start_ns = std::min(d.t_start_ns, o.t_start);
      d.t_end_ns = std::max(d.t_end_ns, o.t_end);
      d.chunks += o.chunks;
      faults |= o.faults;
      if (o.failed && d.first_error.empty())
        d.first_error = nvme::describe(nvme::Status{o.first_error_status}) + " on queue " + std::to_string(o.qid) +
                        " (command id " + std::to_string(o.first_error_tag) + ")";
      if (o.verify_bad && d.first_verify_error.empty())
        d.first_verify_error = "queue " + std::to_string(o.qid) + ": LBA " + std::to_string(o.first_bad_lba) +
                               " read " + hex(o.first_bad_got) + ", expected " + hex(stamp(o.first_bad_lba));
      d.verify_errors += o.verify_bad;
      d.untimed += o.untimed;
      if (o.bad_prps && d.first_error.empty())
        d.first_error = "queue " + std::to_string(o.qid) + ": " + std::to_string(o.bad_prps) + " commands without valid PRPs";
      for (uint32_t b = 0; b < hist::kBuckets; ++b) d.hist[b] += h[size_t(w) * hist::kBuckets + b];
    }
    if (d.t_start_ns == ~0ull) d.t_start_ns = 0;
    // Commands submitted but never completed (a fault stopped the queue) count as errors.
    if (submitted > completed) d.errors += submitted - completed;
    if (faults) {
      d.faults = device::describe_faults(faults);
      if (d.first_error.empty()) d.first_error = "queue fault: " + d.faults;
    }
    d.bytes = d.ios * job.bs;
    results.push_back(std::move(d));
  }
  return results;
}

}  // namespace gpunvme::perf
