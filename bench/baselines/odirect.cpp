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

class OdirectMode final : public StagedMode {
 public:
  explicit OdirectMode(const BaselineContext& ctx) : StagedMode(ctx), pool_(ctx.threads) {
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
    ctx_.consumer->quiesce();  // before the files close: no read may still be running
    for (int fd : fds_) close(fd);
  }

 private:
  void fill(uint32_t l, uint8_t* buf) override {
    layer_chunks(ctx_, l, &chunks_);
    pool_.run(chunks_.size(), [&](uint64_t i) {
      const FileChunk& k = chunks_[i];
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

  ThreadPool pool_;
  std::vector<int> fds_;
  std::vector<uint64_t> sizes_;
  std::vector<FileChunk> chunks_;
};

}  // namespace

std::unique_ptr<Mode> make_odirect_mode(const BaselineContext& ctx) { return std::make_unique<OdirectMode>(ctx); }

}  // namespace gpunvme::bench::ls
