// Baseline "mmap": the ntransformer-style pipeline. The file is mmap'ed (MADV_SEQUENTIAL); one
// worker thread memcpy's layer l from the mapping into pinned staging buffer l % 2; the main thread
// enqueues cudaMemcpyAsync into device layer buffer l % 2 and the compute kernel, and gives the
// staging buffer back once the copy is done. Two staging buffers, two device buffers.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "bench/baselines/baseline.h"

namespace gpunvme::bench::ls {
namespace {

struct Mapping {
  void* base = MAP_FAILED;
  uint64_t size = 0;
  ~Mapping() {
    if (base != MAP_FAILED) munmap(base, size);
  }
};

class MmapMode final : public StagedMode {
 public:
  explicit MmapMode(const BaselineContext& ctx) : StagedMode(ctx) {
    for (const BaselineFile& f : ctx.files) {
      auto m = std::make_unique<Mapping>();
      const int fd = open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) throw Unavailable("cannot open " + f.path + ": " + std::strerror(errno));
      struct stat st{};
      fstat(fd, &st);
      m->size = uint64_t(st.st_size);
      m->base = m->size ? mmap(nullptr, m->size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
      const int err = errno;
      close(fd);
      if (m->base == MAP_FAILED) throw Unavailable("cannot mmap " + f.path + ": " + std::strerror(err));
      madvise(m->base, m->size, MADV_SEQUENTIAL);
      maps_.push_back(std::move(m));
    }
  }

 private:
  void fill(uint32_t l, uint8_t* buf) override {
    for (const Span& s : ctx_.layout->spans[l]) {
      const BaselineFile& f = ctx_.files.at(s.drive);
      const Mapping& m = *maps_.at(s.drive);
      for (uint64_t off = 0; off < s.bytes; off += ctx_.chunk) {
        const uint64_t len = std::min(ctx_.chunk, s.bytes - off);
        const int64_t due = ctx_.pacer ? ctx_.pacer->admit(s.drive, len) : 0;
        const uint64_t at = s.device_byte + off - f.delta;  // file offset
        const uint64_t have = at < m.size ? std::min(len, m.size - at) : 0;
        if (have) std::memcpy(buf + s.dest + off, static_cast<const uint8_t*>(m.base) + at, have);
        if (have < len) std::memset(buf + s.dest + off + have, 0, len - have);  // past the file's end
        if (ctx_.pacer) wait_until_ns(due);
      }
    }
  }

  std::vector<std::unique_ptr<Mapping>> maps_;
};

}  // namespace

std::unique_ptr<Mode> make_mmap_mode(const BaselineContext& ctx) { return std::make_unique<MmapMode>(ctx); }

}  // namespace gpunvme::bench::ls
