// Baselines of bench/layer_stream: ways to get the same layer bytes into GPU memory without gpunvme.
// Each reads the file behind the namespace (the emulator's image, or the GGUF itself) at the bytes
// the namespace holds, into the layer buffer offsets every mode uses (layer_stream.h Span::dest).
//
//   mmap_pipeline.cpp  ntransformer-style: mmap, one worker thread memcpy's a layer into one of two
//                      pinned staging buffers, cudaMemcpyAsync to the GPU, double-buffered
//   odirect.cpp        pread(O_DIRECT) by reader threads into pinned staging, then cudaMemcpyAsync
//   cufile.cpp         cuFileRead straight into the device buffer (GDS compatibility mode without
//                      nvidia-fs), reader threads; only in builds that found cufile.h and libcufile
//
// Optional pacing (pacing.h): each read of `chunk` bytes is admitted by the same drive model the
// emulator uses for `drive=NAME`, and the reader waits for its due time, so a baseline on a modeled
// drive is limited like the gpunvme modes are.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/baselines/pacing.h"
#include "bench/layer_stream.h"

namespace gpunvme::bench::ls {

// The file holding drive d's bytes: device byte b is at file offset b - delta.
struct BaselineFile {
  std::string path;
  uint64_t delta = 0;
};

struct BaselineContext {
  const Layout* layout = nullptr;
  Consumer* consumer = nullptr;
  std::vector<BaselineFile> files;  // [drive]
  uint32_t threads = 4;             // reader threads (odirect, cufile)
  uint64_t chunk = 1 << 20;         // bytes per read / copy step (and per paced request)
  std::shared_ptr<Pacer> pacer;     // null: unpaced
};

std::unique_ptr<Mode> make_mmap_mode(const BaselineContext& ctx);
std::unique_ptr<Mode> make_odirect_mode(const BaselineContext& ctx);
std::unique_ptr<Mode> make_cufile_mode(const BaselineContext& ctx);  // throws Unavailable without cuFile

// Staging memory: pinned (cudaHostAlloc) when the consumer is a GPU, else page-aligned host memory.
class Staging {
 public:
  Staging(uint64_t bytes, bool pinned);
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  uint8_t* data() const { return p_; }
  uint64_t size() const { return bytes_; }

 private:
  uint8_t* p_ = nullptr;
  uint64_t bytes_ = 0;
  bool pinned_ = false;
};

// One worker thread fills staging buffer l % 2 with layer l, for l in [0, n), in order, while the
// caller consumes: wait(l) returns the buffer once filled, release(l) lets the worker refill it.
// The worker's exceptions are rethrown by wait(); destruction stops and joins it.
class StagedPipeline {
 public:
  using Fill = std::function<void(uint32_t layer, uint8_t* buffer)>;
  StagedPipeline(uint32_t n, uint8_t* buffer0, uint8_t* buffer1, Fill fill);
  ~StagedPipeline();
  uint8_t* wait(uint32_t l);
  void release(uint32_t l);
  // When the worker finished filling the last layer it filled.
  Clock::time_point last_filled() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_filled_;
  }

 private:
  void run();
  uint32_t n_;
  uint8_t* buf_[2];
  Fill fill_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t filled_[2] = {-1, -1};  // layer in the buffer, -1 = free
  bool stop_ = false;
  std::exception_ptr error_;
  Clock::time_point last_filled_{};
  std::thread worker_;
};

// One timed pass of n layers through a StagedPipeline over buffer0/buffer1 (null for cuFile, which
// reads into GPU memory): fill() on the worker, consume(l, buffer) on the calling thread between
// wait(l) and release(l). landed_s: when the worker had filled the last layer.
using ConsumeLayer = std::function<void(uint32_t layer, uint8_t* buffer)>;
PassResult staged_pass(Consumer& c, uint32_t n, uint64_t compute_ns, uint8_t* buffer0, uint8_t* buffer1,
                       const StagedPipeline::Fill& fill, const ConsumeLayer& consume);

// The double-buffered staging pipeline both host-staged baselines share: a worker fills staging
// buffer l % 2 with layer l (fill(), the baseline's own way of reading), the caller hands each
// filled buffer to the consumer (copy to the GPU + compute) and gives it back.
class StagedMode : public Mode {
 public:
  explicit StagedMode(const BaselineContext& ctx);
  ~StagedMode() override;  // no copy may still read the staging buffers
  PassResult stream(uint32_t n, uint64_t compute_ns) override;

 protected:
  virtual void fill(uint32_t layer, uint8_t* buffer) = 0;
  BaselineContext ctx_;

 private:
  Staging staging0_, staging1_;
};

// A fixed pool of threads that runs `count` jobs (job(i) for i in [0, count)) and waits for them.
// The first exception is rethrown by run().
class ThreadPool {
 public:
  explicit ThreadPool(uint32_t threads);
  ~ThreadPool();
  void run(uint64_t count, const std::function<void(uint64_t)>& job);
  uint32_t size() const { return uint32_t(threads_.size()); }

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(uint64_t)>* job_ = nullptr;
  uint64_t count_ = 0, next_ = 0, taken_ = 0, finished_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Layer l as file reads of at most ctx.chunk bytes: which drive's file, where in it, where in the
// layer buffer (threaded readers take one each).
struct FileChunk {
  uint32_t drive;
  uint64_t file_offset;
  uint64_t bytes;
  uint64_t dest;
};
void layer_chunks(const BaselineContext& ctx, uint32_t l, std::vector<FileChunk>* out);

// Parts of layer l as they sit in a staging buffer laid out like the layer buffer.
std::vector<HostPart> staged_parts(const Layout& layout, uint32_t l, const uint8_t* buffer);

// Where the file is and what the page cache holds of it.
struct CacheState {
  bool tmpfs = false;          // RAM-backed filesystem (tmpfs/ramfs): always "hot", nothing to drop
  double resident = -1;        // share of the file's pages in the page cache (mincore), -1 unknown
  std::string fs;              // "tmpfs", "ext4/xfs/other", for the report
};
CacheState cache_state(const std::string& path);
// posix_fadvise(DONTNEED) on the whole file (a no-op on tmpfs); returns false if it failed.
bool drop_cache(const std::string& path);

}  // namespace gpunvme::bench::ls
