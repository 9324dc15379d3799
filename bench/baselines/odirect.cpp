// Baseline "odirect": pread(O_DIRECT) into pinned staging, then cudaMemcpyAsync. A producer thread
// fills staging buffer l % 2 with layer l by handing `chunk`-sized preads to a pool of reader
// threads (the page cache is bypassed where the filesystem honours O_DIRECT); the main thread copies
// to the GPU and computes as in the mmap baseline. Double-buffered.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "bench/baselines/baseline.h"

namespace gpunvme::bench::ls {
namespace {

class OdirectMode final : public Mode {
 public:
  explicit OdirectMode(const BaselineContext& ctx)
      : ctx_(ctx),
        staging0_(ctx.layout->layer_buffer_bytes, ctx.consumer->on_gpu()),
        staging1_(ctx.layout->layer_buffer_bytes, ctx.consumer->on_gpu()),
        pool_(ctx.threads) {
    if (ctx.chunk % 4096) throw Unavailable("--chunk must be a multiple of 4 KiB for O_DIRECT");
    for (const BaselineFile& f : ctx.files) {
      const int fd = open(f.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        for (int x : fds_) close(x);
        throw Unavailable("open(" + f.path + ", O_DIRECT): " + std::strerror(err) +
                          (err == EINVAL ? " (the filesystem does not support O_DIRECT; tmpfs has it from Linux 6.6 "
                                           "on; put the image on ext4/xfs with --image)"
                                         : ""));
      }
      struct stat st{};
      fstat(fd, &st);
      sizes_.push_back(uint64_t(st.st_size));
      fds_.push_back(fd);
    }
  }
  ~OdirectMode() override {
    ctx_.consumer->quiesce();  // no copy may still read the staging buffers
    for (int fd : fds_) close(fd);
  }

  PassResult stream(uint32_t n, uint64_t compute_ns) override {
    const Layout& L = *ctx_.layout;
    Consumer& c = *ctx_.consumer;
    c.begin_pass(n, compute_ns);
    const auto t0 = Clock::now();
    Clock::time_point landed = t0;
    {
      StagedPipeline pipe(n, staging0_.data(), staging1_.data(), [&](uint32_t l, uint8_t* buf) { fill(l, buf); });
      for (uint32_t l = 0; l < n; ++l) {
        uint8_t* buf = pipe.wait(l);
        const auto parts = staged_parts(L, l, buf);
        c.consume_host(l, parts, /*wait_copy=*/true);
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

 private:
  struct Chunk {
    uint32_t drive;
    uint64_t file_offset;
    uint64_t bytes;
    uint64_t dest;
  };

  void fill(uint32_t l, uint8_t* buf) {
    chunks_.clear();
    for (const Span& s : ctx_.layout->spans[l])
      for (uint64_t off = 0; off < s.bytes; off += ctx_.chunk)
        chunks_.push_back(Chunk{s.drive, s.device_byte + off - ctx_.files.at(s.drive).delta,
                                std::min(ctx_.chunk, s.bytes - off), s.dest + off});
    pool_.run(chunks_.size(), [&](uint64_t i) {
      const Chunk& k = chunks_[i];
      const int64_t due = ctx_.pacer ? ctx_.pacer->admit(k.drive, k.bytes) : 0;
      uint64_t done = 0;
      while (done < k.bytes) {
        const ssize_t got = pread(fds_[k.drive], buf + k.dest + done, k.bytes - done, off_t(k.file_offset + done));
        if (got < 0) {
          if (errno == EINTR) continue;
          throw std::runtime_error("odirect: pread(" + ctx_.files[k.drive].path + ", " + std::to_string(k.bytes - done) +
                                   " bytes at " + std::to_string(k.file_offset + done) + "): " + std::strerror(errno));
        }
        if (got == 0) break;  // end of file
        done += uint64_t(got);
        if (done % 512) {  // O_DIRECT ends short only at the end of the file
          if (k.file_offset + done < sizes_[k.drive])
            throw std::runtime_error("odirect: unaligned short read of " + ctx_.files[k.drive].path);
          break;
        }
      }
      if (done < k.bytes) std::memset(buf + k.dest + done, 0, k.bytes - done);  // past the file's end
      if (ctx_.pacer) wait_until_ns(due);
    });
  }

  BaselineContext ctx_;
  Staging staging0_, staging1_;
  ThreadPool pool_;
  std::vector<int> fds_;
  std::vector<uint64_t> sizes_;
  std::vector<Chunk> chunks_;
};

}  // namespace

std::unique_ptr<Mode> make_odirect_mode(const BaselineContext& ctx) { return std::make_unique<OdirectMode>(ctx); }

}  // namespace gpunvme::bench::ls
