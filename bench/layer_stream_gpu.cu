// The GPU consumer of bench/layer_stream (CUDA builds): two layer buffers in device memory, a copy
// stream and a compute stream, and the synthetic compute kernel.
//
// Per layer l (buffer b = l % 2):
//   copy stream:    wait for kernel(l-2) (it read buffer b) -> cudaMemcpyAsync of the layer's parts
//                   into buffer b -> event copy_done[l]
//   compute stream: wait for copy_done[l] -> kernel(l): every byte of the layer's checksum ranges is
//                   read and folded into sums[l]; then each block spins on %globaltimer until
//                   compute_ns have passed since it started -> event k_done[l]
// The kernel therefore lasts max(compute_ns, time to read the layer from HBM) + launch overhead.
#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>

#include "bench/layer_stream.h"

namespace gpunvme::bench::ls {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string("layer_stream GPU consumer: ") + what + ": " + cudaGetErrorString(e));
  }
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// 256 threads x 4 blocks per SM, at most 40 registers (launch bound for 6 blocks): the whole grid is resident at
// once (so every block's spin starts together and the kernel lasts compute_ns), and half the SM's
// threads and a third of its registers stay free for the gpunvme-gpu read kernels on the io streams.
__global__ void __launch_bounds__(256, 6) consume_kernel(const uint8_t* __restrict__ buf, const Range* __restrict__ ranges,
                                                      uint32_t n_ranges, unsigned long long* __restrict__ sum,
                                                      uint64_t compute_ns) {
  __shared__ uint64_t start;
  __shared__ unsigned long long block_sum;
  if (threadIdx.x == 0) {
    start = global_ns();
    block_sum = 0;
  }
  __syncthreads();
  uint64_t acc = 0;
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint32_t r = 0; r < n_ranges; ++r) {
    const Range rg = ranges[r];
    const uint64_t* p = reinterpret_cast<const uint64_t*>(buf + rg.dest);  // dest is 8-aligned (checked on the host)
    const uint64_t words = rg.bytes / 8;
    uint64_t i = tid;
    for (; i + 3 * stride < words; i += 4 * stride) {  // four independent loads in flight per thread
      const uint64_t a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride),
                     d = __ldg(p + i + 3 * stride);
      acc += fold_word(a, rg.tag + 8 * i) + fold_word(b, rg.tag + 8 * (i + stride)) +
             fold_word(c, rg.tag + 8 * (i + 2 * stride)) + fold_word(d, rg.tag + 8 * (i + 3 * stride));
    }
    for (; i < words; i += stride) acc += fold_word(__ldg(p + i), rg.tag + 8 * i);
    if (tid == 0 && (rg.bytes % 8)) {
      uint64_t w = 0;
      const uint8_t* t = buf + rg.dest + 8 * words;
      for (uint64_t k = 0; k < rg.bytes % 8; ++k) w |= uint64_t(t[k]) << (8 * k);
      acc += fold_word(w, rg.tag + 8 * words);
    }
  }
  for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(&block_sum, (unsigned long long)acc);
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(sum, block_sum);
    while (global_ns() - start < compute_ns) {
    }
  }
  __syncthreads();
}

class GpuConsumer final : public Consumer {
 public:
  explicit GpuConsumer(const Layout& layout) : layout_(layout) {
    check(cudaGetDevice(&device_), "cudaGetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
    name_ = prop.name;
    blocks_ = uint32_t(prop.multiProcessorCount) * 4;
    check(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate(copy)");
    check(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "cudaStreamCreate(compute)");
    for (auto& b : dev_) {
      check(cudaMalloc(&b, layout.layer_buffer_bytes), "cudaMalloc(layer buffer)");
      check(cudaMemset(b, 0, layout.layer_buffer_bytes), "cudaMemset(layer buffer)");
    }
    // Every layer's checksum ranges, flattened, in device memory.
    std::vector<Range> all;
    for (const auto& rs : layout.ranges) {
      range_first_.push_back(uint32_t(all.size()));
      range_count_.push_back(uint32_t(rs.size()));
      for (const Range& r : rs) {
        if (r.dest % 8) throw std::runtime_error("layer_stream: a checksum range starts at an unaligned offset");
        all.push_back(r);
      }
    }
    check(cudaMalloc(&ranges_, std::max<size_t>(1, all.size()) * sizeof(Range)), "cudaMalloc(ranges)");
    if (!all.empty())
      check(cudaMemcpy(ranges_, all.data(), all.size() * sizeof(Range), cudaMemcpyHostToDevice), "cudaMemcpy(ranges)");
    const uint32_t L = layout.layers();
    check(cudaMalloc(&sums_, std::max<uint32_t>(1, L) * sizeof(unsigned long long)), "cudaMalloc(sums)");
    for (auto* v : {&copy_start_, &copy_done_, &k_start_, &k_done_}) {
      v->resize(L);
      for (auto& e : *v) check(cudaEventCreate(&e), "cudaEventCreate");
    }
  }

  ~GpuConsumer() override {
    cudaStreamSynchronize(copy_);
    cudaStreamSynchronize(compute_);
    for (auto* v : {&copy_start_, &copy_done_, &k_start_, &k_done_})
      for (auto e : *v) cudaEventDestroy(e);
    cudaFree(sums_);
    cudaFree(ranges_);
    for (auto b : dev_) cudaFree(b);
    cudaStreamDestroy(copy_);
    cudaStreamDestroy(compute_);
  }

  std::string describe() const override { return "GPU " + name_ + " (device " + std::to_string(device_) + ")"; }
  bool on_gpu() const override { return true; }

  void begin_pass(uint32_t n, uint64_t compute_ns) override {
    if (n > layout_.layers()) throw std::runtime_error("layer_stream: pass longer than the layout");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize(before pass)");
    check(cudaMemsetAsync(sums_, 0, std::max<uint32_t>(1, n) * sizeof(unsigned long long), compute_),
          "cudaMemsetAsync(sums)");
    n_ = n;
    compute_ns_ = compute_ns;
    host_copied_.assign(n, false);
    std::lock_guard<std::mutex> lock(mu_);
    enqueued_ = 0;
  }

  void consume_host(uint32_t l, std::span<const HostPart> parts, bool wait_copy) override {
    at(l);
    uint8_t* b = static_cast<uint8_t*>(dev_[l % 2]);
    if (l >= 2) check(cudaStreamWaitEvent(copy_, k_done_[l - 2], 0), "cudaStreamWaitEvent(buffer free)");
    check(cudaEventRecord(copy_start_[l], copy_), "cudaEventRecord(copy start)");
    for (const HostPart& p : parts)
      check(cudaMemcpyAsync(b + p.dest, p.src, p.bytes, cudaMemcpyHostToDevice, copy_), "cudaMemcpyAsync(layer)");
    check(cudaEventRecord(copy_done_[l], copy_), "cudaEventRecord(copy done)");
    check(cudaStreamWaitEvent(compute_, copy_done_[l], 0), "cudaStreamWaitEvent(copy done)");
    host_copied_[l] = true;
    launch(l);
    if (wait_copy) check(cudaEventSynchronize(copy_done_[l]), "copy of a layer to the GPU");
  }

  void* device_buffer_for(uint32_t l) override {
    at(l);
    check(cudaSetDevice(device_), "cudaSetDevice");
    if (l >= 2) {
      std::unique_lock<std::mutex> lock(mu_);
      // kernel(l-2) was enqueued; bounded, so a main thread that died cannot hang the reader for ever
      if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return enqueued_ >= l - 1; }))
        throw std::runtime_error("layer_stream GPU consumer: layer " + std::to_string(l - 2) +
                                 " was not handed to the GPU within 60 s (the main loop stopped?)");
      lock.unlock();
      check(cudaEventSynchronize(k_done_[l - 2]), "compute kernel (waiting for a layer buffer)");
    }
    return dev_[l % 2];
  }

  void consume_device(uint32_t l) override {
    at(l);
    launch(l);
  }

  void* copy_stream() override { return copy_; }

  void quiesce() noexcept override {
    cudaStreamSynchronize(copy_);
    cudaStreamSynchronize(compute_);
    cudaGetLastError();
  }

  ConsumerPass end_pass() override {
    check(cudaStreamSynchronize(copy_), "copy stream");
    check(cudaStreamSynchronize(compute_), "compute stream (the consumer kernels)");
    ConsumerPass p;
    std::vector<unsigned long long> s(n_);
    if (n_) check(cudaMemcpy(s.data(), sums_, n_ * sizeof(unsigned long long), cudaMemcpyDeviceToHost), "cudaMemcpy(sums)");
    p.sums.assign(s.begin(), s.end());
    for (uint32_t l = 0; l < n_; ++l) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, k_start_[l], k_done_[l]), "cudaEventElapsedTime(kernel)");
      p.compute_s += ms / 1e3;
      if (host_copied_[l]) {
        check(cudaEventElapsedTime(&ms, copy_start_[l], copy_done_[l]), "cudaEventElapsedTime(copy)");
        p.copy_s += ms / 1e3;
      }
    }
    return p;
  }

 private:
  void at(uint32_t l) const {
    if (l >= n_) throw std::runtime_error("layer_stream GPU consumer: layer " + std::to_string(l) + " outside the pass");
  }

  void launch(uint32_t l) {
    check(cudaEventRecord(k_start_[l], compute_), "cudaEventRecord(kernel start)");
    consume_kernel<<<blocks_, 256, 0, compute_>>>(static_cast<const uint8_t*>(dev_[l % 2]), ranges_ + range_first_[l],
                                                  range_count_[l], sums_ + l, compute_ns_);
    check(cudaGetLastError(), "consume_kernel launch");
    check(cudaEventRecord(k_done_[l], compute_), "cudaEventRecord(kernel done)");
    {
      std::lock_guard<std::mutex> lock(mu_);
      enqueued_ = l + 1;
    }
    cv_.notify_all();
  }

  const Layout& layout_;
  int device_ = 0;
  std::string name_;
  uint32_t blocks_ = 0;
  cudaStream_t copy_ = nullptr, compute_ = nullptr;
  void* dev_[2] = {nullptr, nullptr};
  Range* ranges_ = nullptr;
  std::vector<uint32_t> range_first_, range_count_;
  unsigned long long* sums_ = nullptr;
  std::vector<cudaEvent_t> copy_start_, copy_done_, k_start_, k_done_;
  std::vector<bool> host_copied_;
  uint32_t n_ = 0;
  uint64_t compute_ns_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t enqueued_ = 0;
};

}  // namespace

std::unique_ptr<Consumer> make_gpu_consumer(const Layout& layout) { return std::make_unique<GpuConsumer>(layout); }

void* alloc_pinned(uint64_t bytes) {
  void* p = nullptr;
  check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc(staging)");
  return p;
}

void free_pinned(void* p) {
  if (p) cudaFreeHost(p);
}

}  // namespace gpunvme::bench::ls
