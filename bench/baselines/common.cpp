// Shared machinery of the baselines: staging memory, the one-worker double buffer, a thread pool,
// page-cache state.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "bench/baselines/baseline.h"

namespace gpunvme::bench::ls {

Staging::Staging(uint64_t bytes, bool pinned) : bytes_(bytes), pinned_(pinned) {
  const uint64_t rounded = (bytes + 4095) / 4096 * 4096;
#if GPUNVME_HAVE_CUDA
  if (pinned) {
    p_ = static_cast<uint8_t*>(alloc_pinned(rounded));
    return;
  }
#else
  pinned_ = false;
#endif
  void* p = nullptr;
  if (posix_memalign(&p, 4096, rounded) != 0)
    throw std::runtime_error("cannot allocate " + std::to_string(rounded >> 20) + " MiB of staging memory");
  std::memset(p, 0, rounded);  // fault it in now, not in the timed loop
  p_ = static_cast<uint8_t*>(p);
}

Staging::~Staging() {
#if GPUNVME_HAVE_CUDA
  if (pinned_) {
    free_pinned(p_);
    return;
  }
#endif
  std::free(p_);
}

StagedPipeline::StagedPipeline(uint32_t n, uint8_t* buffer0, uint8_t* buffer1, Fill fill)
    : n_(n), buf_{buffer0, buffer1}, fill_(std::move(fill)) {
  worker_ = std::thread([this] { run(); });
}

StagedPipeline::~StagedPipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void StagedPipeline::run() {
  try {
    for (uint32_t l = 0; l < n_; ++l) {
      const int b = int(l % 2);
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || filled_[b] < 0; });
        if (stop_) return;
      }
      fill_(l, buf_[b]);
      {
        std::lock_guard<std::mutex> lock(mu_);
        filled_[b] = l;
        last_filled_ = Clock::now();
      }
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

uint8_t* StagedPipeline::wait(uint32_t l) {
  const int b = int(l % 2);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return error_ || filled_[b] == int64_t(l); });
  if (filled_[b] != int64_t(l)) std::rethrow_exception(error_);
  return buf_[b];
}

void StagedPipeline::release(uint32_t l) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    filled_[l % 2] = -1;
  }
  cv_.notify_all();
}

ThreadPool::ThreadPool(uint32_t threads) {
  for (uint32_t i = 0; i < std::max<uint32_t>(threads, 1); ++i) threads_.emplace_back([this] { loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || next_ < count_; });
    if (stop_) return;
    const uint64_t i = next_++;
    ++taken_;
    const auto* job = job_;
    lock.unlock();
    std::exception_ptr e;
    try {
      (*job)(i);
    } catch (...) {
      e = std::current_exception();
    }
    lock.lock();
    ++finished_;
    if (e) {
      if (!error_) error_ = e;
      next_ = count_;  // the rest is skipped
    }
    if (next_ >= count_ && finished_ == taken_) done_cv_.notify_all();
  }
}

void ThreadPool::run(uint64_t count, const std::function<void(uint64_t)>& job) {
  if (count == 0) return;
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &job;
  count_ = count;
  next_ = 0;
  taken_ = 0;
  finished_ = 0;
  error_ = nullptr;
  cv_.notify_all();
  done_cv_.wait(lock, [&] { return next_ >= count_ && finished_ == taken_; });
  job_ = nullptr;
  count_ = 0;
  next_ = 0;
  if (error_) std::rethrow_exception(error_);
}

std::vector<HostPart> staged_parts(const Layout& layout, uint32_t l, const uint8_t* buffer) {
  std::vector<HostPart> parts;
  for (const Span& s : layout.spans[l]) parts.push_back(HostPart{buffer + s.dest, s.bytes, s.dest});
  return parts;
}

CacheState cache_state(const std::string& path) {
  CacheState c;
  struct statfs sf{};
  if (statfs(path.c_str(), &sf) == 0) {
    c.tmpfs = sf.f_type == 0x01021994 /* TMPFS_MAGIC */ || sf.f_type == 0x858458f6 /* RAMFS_MAGIC */;
    c.fs = c.tmpfs ? "tmpfs (RAM)" : "disk-backed filesystem";
  } else {
    c.fs = "unknown";
  }
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return c;
  struct stat st{};
  if (fstat(fd, &st) == 0 && st.st_size > 0) {
    const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
    const uint64_t size = uint64_t(st.st_size);
    void* m = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) {
      std::vector<unsigned char> vec((size + page - 1) / page);
      if (mincore(m, size, vec.data()) == 0) {
        uint64_t in = 0;
        for (unsigned char v : vec) in += v & 1;
        c.resident = vec.empty() ? 0 : double(in) / double(vec.size());
      }
      munmap(m, size);
    }
  }
  close(fd);
  return c;
}

bool drop_cache(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  fdatasync(fd);
  const bool ok = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  close(fd);
  return ok;
}

void layer_chunks(const BaselineContext& ctx, uint32_t l, std::vector<FileChunk>* out) {
  out->clear();
  for (const Span& s : ctx.layout->spans[l])
    for (uint64_t off = 0; off < s.bytes; off += ctx.chunk)
      out->push_back(FileChunk{s.drive, s.device_byte + off - ctx.files.at(s.drive).delta,
                               std::min(ctx.chunk, s.bytes - off), s.dest + off});
}

StagedMode::StagedMode(const BaselineContext& ctx)
    : ctx_(ctx),
      staging0_(ctx.layout->layer_buffer_bytes, ctx.consumer->on_gpu()),
      staging1_(ctx.layout->layer_buffer_bytes, ctx.consumer->on_gpu()) {}

StagedMode::~StagedMode() { ctx_.consumer->quiesce(); }

PassResult staged_pass(Consumer& c, uint32_t n, uint64_t compute_ns, uint8_t* buffer0, uint8_t* buffer1,
                       const StagedPipeline::Fill& fill, const ConsumeLayer& consume) {
  c.begin_pass(n, compute_ns);
  const auto t0 = Clock::now();
  Clock::time_point landed = t0;
  {
    StagedPipeline pipe(n, buffer0, buffer1, fill);
    for (uint32_t l = 0; l < n; ++l) {
      consume(l, pipe.wait(l));
      pipe.release(l);
    }
    landed = pipe.last_filled();
  }
  PassResult r;
  r.consumer = c.end_pass();
  r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.landed_s = std::chrono::duration<double>(landed - t0).count();
  return r;
}

PassResult StagedMode::stream(uint32_t n, uint64_t compute_ns) {
  const Layout& L = *ctx_.layout;
  Consumer& c = *ctx_.consumer;
  return staged_pass(
      c, n, compute_ns, staging0_.data(), staging1_.data(), [&](uint32_t l, uint8_t* buf) { fill(l, buf); },
      [&](uint32_t l, uint8_t* buf) { c.consume_host(l, staged_parts(L, l, buf), /*wait_copy=*/true); });
}

}  // namespace gpunvme::bench::ls
