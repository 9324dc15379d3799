#include "bench/llm_tokens_mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "device/cuda_check.h"

namespace gpunvme::bench {
namespace {

constexpr uint64_t kChunk = 1u << 20;  // bytes per memcpy step and per paced request

// Minor + major page faults of the calling thread so far.
uint64_t thread_faults() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return uint64_t(u.ru_minflt) + uint64_t(u.ru_majflt);
}

}  // namespace

MmapLayerSource::MmapLayerSource(const std::vector<std::string>& images, const llm::ModelOnDevice& m,
                                 std::vector<llm::PackedRanges> layers, std::shared_ptr<ls::Pacer> pacer,
                                 MmapResidency residency)
    : residency_(residency), stripe_(m.stripe), layers_(std::move(layers)), pacer_(std::move(pacer)) {
  if (layers_.empty()) throw std::invalid_argument("mmap loader: no layers");
  if (images.size() != (stripe_ ? stripe_->members : 1))
    throw std::invalid_argument("mmap loader: " + std::to_string(images.size()) + " image(s) for a model on " +
                                std::to_string(stripe_ ? stripe_->members : 1) + " namespace(s)");
  for (const llm::PackedRanges& r : layers_) {
    at_.emplace_back();
    for (const llm::PackedRanges::Piece& q : r.pieces) at_.back().push_back(m.device_byte(q.begin));
    slot_ = std::max(slot_, r.bytes);
  }
  for (const std::string& image : images) {
    const int fd = ::open(image.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("mmap loader: cannot open " + image + ": " + std::strerror(errno));
    struct stat st{};
    fstat(fd, &st);
    Map mp;
    mp.bytes = uint64_t(st.st_size);
    void* p = mp.bytes ? mmap(nullptr, mp.bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw std::runtime_error("mmap loader: cannot mmap " + image + ": " + std::strerror(err));
    mp.p = static_cast<const uint8_t*>(p);
    madvise(p, mp.bytes, MADV_SEQUENTIAL);
    maps_.push_back(mp);
  }
  const uint64_t logical = stripe_ ? stripe_->logical_blocks() * stripe_->lba_size : maps_[0].bytes;
  for (const std::vector<uint64_t>& layer : at_)
    for (const uint64_t a : layer)
      if (a >= logical) throw std::runtime_error("mmap loader: a layer lies past the end of " + images[0]);
  device::check_cuda(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "mmap loader: copy stream");
  for (int b = 0; b < 2; ++b) {
    device::check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&staging_[b]), slot_, cudaHostAllocDefault), "mmap loader: staging");
    device::check_cuda(cudaMalloc(reinterpret_cast<void**>(&device_[b]), slot_), "mmap loader: GPU buffers");
    device::check_cuda(cudaEventCreateWithFlags(&copied_[b], cudaEventDisableTiming), "mmap loader: event");
    device::check_cuda(cudaEventCreateWithFlags(&free_[b], cudaEventDisableTiming), "mmap loader: event");
  }
  for (uint32_t i = 0; i < maps_.size(); ++i) touched_.push_back(Touched{i});
  thread_ = std::thread([this] { worker(); });
  if (residency_ == MmapResidency::kEvicted) reclaim_thread_ = std::thread([this] { reclaimer(); });
}

MmapLayerSource::~MmapLayerSource() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (reclaim_thread_.joinable()) reclaim_thread_.join();
  if (copy_) cudaStreamSynchronize(copy_);
  for (int b = 0; b < 2; ++b) {
    cudaFreeHost(staging_[b]);
    cudaFree(device_[b]);
    if (copied_[b]) cudaEventDestroy(copied_[b]);
    if (free_[b]) cudaEventDestroy(free_[b]);
  }
  if (copy_) cudaStreamDestroy(copy_);
  for (const Map& mp : maps_) munmap(const_cast<uint8_t*>(mp.p), mp.bytes);
}

// The one worker: layer n (cyclic over the ranges) into staging n % 2, as soon as that buffer is free.
void MmapLayerSource::worker() {
  try {
    for (uint64_t n = 0;; ++n) {
      const int b = int(n % 2);
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || filled_[b] < 0; });
        if (stop_) return;
      }
      const uint64_t faults0 = thread_faults();
      fill(n, staging_[b]);
      faults_.fetch_add(thread_faults() - faults0, std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> lock(mu_);
        filled_[b] = int64_t(n);
        if (residency_ == MmapResidency::kEvicted)
          for (Touched& t : touched_) {
            if (t.end > t.begin) reclaim_.push_back(t);
            t = Touched{t.member};
          }
      }
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

// The reclaim thread (kEvicted): drops the pages of each copied layer from the mapping, so the next
// token's copy faults them in again. Pages are rounded outward: a neighbour layer's edge page that goes
// too is faulted in again by its own copy (its bytes stay in the file).
void MmapLayerSource::reclaimer() {
  try {
    const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
    for (;;) {
      std::vector<Touched> batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !reclaim_.empty(); });
        if (stop_) return;
        batch.swap(reclaim_);
      }
      for (const Touched& t : batch) {
        const Map& mp = maps_[t.member];
        const uint64_t lo = t.begin / page * page, hi = std::min((t.end + page - 1) / page * page, (mp.bytes + page - 1) / page * page);
        if (madvise(const_cast<uint8_t*>(mp.p) + lo, hi - lo, MADV_DONTNEED) != 0)
          throw std::runtime_error(std::string("mmap loader: cannot drop copied pages (madvise): ") + std::strerror(errno));
      }
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

int64_t MmapLayerSource::copy(uint64_t at, uint64_t len, uint8_t* dst) {
  int64_t due = 0;
  for (uint64_t done = 0; done < len;) {
    const uint64_t b = at + done;
    uint32_t member = 0;
    uint64_t src = b, n = len - done;
    if (stripe_) {  // the RAID-0 rule of model/stripe.h, in bytes
      const uint64_t unit = stripe_->unit_bytes(), s = b / unit;
      member = uint32_t(s % stripe_->members);
      src = stripe_->data_start_lba * stripe_->lba_size + (s / stripe_->members) * unit + b % unit;
      n = std::min(n, unit - b % unit);
    }
    if (pacer_) due = std::max(due, pacer_->admit(member, n));
    const Map& mp = maps_[member];
    const uint64_t have = src < mp.bytes ? std::min(n, mp.bytes - src) : 0;
    if (have) {
      std::memcpy(dst + done, mp.p + src, have);
      Touched& t = touched_[member];
      t.begin = std::min(t.begin, src);
      t.end = std::max(t.end, src + have);
    }
    if (have < n) std::memset(dst + done + have, 0, n - have);
    done += n;
  }
  return due;
}

// One memcpy worker; per step it asks every member drive for 1 MiB (one drive: 1 MiB) and waits for
// the last of them, as a readahead over the array would.
void MmapLayerSource::fill(uint64_t n, uint8_t* dst) {
  const size_t j = n % layers_.size();
  const uint64_t step = kChunk * (stripe_ ? stripe_->members : 1);
  for (size_t k = 0; k < layers_[j].pieces.size(); ++k) {
    const llm::PackedRanges::Piece& q = layers_[j].pieces[k];
    const uint64_t bytes = q.end - q.begin;
    for (uint64_t off = 0; off < bytes; off += step) {
      const int64_t due = copy(at_[j][k] + off, std::min(step, bytes - off), dst + q.at + off);
      if (pacer_) ls::wait_until_ns(due);
    }
  }
}

llm::WeightView MmapLayerSource::acquire(llm::gpu_stream_t compute) {
  const int b = int(consumed_ % 2);
  const size_t j = consumed_ % layers_.size();
  {
    // Bounded: a worker that stopped with an error wakes us; a live one fills at the drive's pace.
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return error_ || filled_[b] == int64_t(consumed_); }))
      throw std::runtime_error("mmap loader: layer not filled within 60 s");
    if (error_) std::rethrow_exception(error_);
  }
  device::check_cuda(cudaStreamWaitEvent(copy_, free_[b], 0), "mmap loader: wait for the GPU buffer");
  device::check_cuda(cudaMemcpyAsync(device_[b], staging_[b], layers_[j].bytes, cudaMemcpyHostToDevice, copy_), "mmap loader: copy");
  device::check_cuda(cudaEventRecord(copied_[b], copy_), "mmap loader: copy done");
  device::check_cuda(cudaEventSynchronize(copied_[b]), "mmap loader: copy");  // the staging buffer is free again
  {
    std::lock_guard<std::mutex> lock(mu_);
    filled_[b] = -1;
  }
  cv_.notify_all();
  device::check_cuda(cudaStreamWaitEvent(compute, copied_[b], 0), "mmap loader: compute waits for the copy");
  return {device_[b], &layers_[j]};
}

void MmapLayerSource::release(llm::gpu_stream_t compute) {
  device::check_cuda(cudaEventRecord(free_[consumed_ % 2], compute), "mmap loader: GPU buffer free");
  ++consumed_;
}

void MmapLayerSource::sync() { device::check_cuda(cudaStreamSynchronize(copy_), "mmap loader: copy stream"); }

}  // namespace gpunvme::bench
