#include "host/emulator/namespace.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "host/error.h"

namespace gpunvme::emu {
namespace {

[[noreturn]] void io_error(const std::string& what) {
  throw Error(ErrorKind::kIo, "emu: " + what + ": " + std::strerror(errno));
}

uint64_t iov_bytes(const iovec* iov, int n) {
  uint64_t len = 0;
  for (int i = 0; i < n; ++i) len += iov[i].iov_len;
  return len;
}

// preadv/pwritev until done; iovecs are consumed in place on short transfers. `zero_past_eof`
// (reads of a read-only file shorter than its namespace): the end of the file reads as zeros.
template <class Fn>
bool vector_io(Fn fn, uint64_t off, const iovec* iov_in, int n, bool zero_past_eof = false) {
  iovec local[64];
  while (n > 0) {
    const int take = n < 64 ? n : 64;
    std::memcpy(local, iov_in, sizeof(iovec) * size_t(take));
    iovec* iov = local;
    int left = take;
    while (left > 0) {
      const ssize_t r = fn(iov, left, off_t(off));
      if (r < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      if (r == 0 && zero_past_eof) {
        for (int i = 0; i < left; ++i) std::memset(iov[i].iov_base, 0, iov[i].iov_len);
        break;
      }
      if (r == 0) return false;  // past the end of a file that shrank under us
      off += uint64_t(r);
      size_t done = size_t(r);
      while (left > 0 && done >= iov->iov_len) {
        done -= iov->iov_len;
        ++iov;
        --left;
      }
      if (left > 0) {
        iov->iov_base = static_cast<char*>(iov->iov_base) + done;
        iov->iov_len -= done;
      }
    }
    iov_in += take;
    n -= take;
  }
  return true;
}

}  // namespace

Namespace::Namespace(const NamespaceConfig& cfg)
    : backing_(cfg.backing), path_(cfg.path), lba_bytes_(cfg.lba_bytes) {
  if (lba_bytes_ != 512 && lba_bytes_ != 4096)
    throw Error(ErrorKind::kInvalidArgument, "emu: LBA size " + std::to_string(lba_bytes_) + " is not 512 or 4096");
  lba_shift_ = lba_bytes_ == 512 ? 9 : 12;
  uint64_t bytes = cfg.size_bytes;
  switch (backing_) {
    case Backing::kNull:
      break;
    case Backing::kRam: {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED && errno == ENOMEM)  // out of memory or address space: a resource, not an I/O error
        throw Error(ErrorKind::kResource, "emu: cannot reserve " + std::to_string(bytes) +
                                              " bytes of RAM for a namespace: " + std::strerror(errno) +
                                              "; ask for a smaller size= or back it with a file");
      if (p == MAP_FAILED) io_error("cannot reserve " + std::to_string(bytes) + " bytes of RAM for a namespace");
      ram_ = static_cast<char*>(p);
      ram_bytes_ = bytes;
      break;
    }
    case Backing::kFile:
      bytes = open_file(cfg);
      break;
    case Backing::kGenerated: {
      const Generator* g = registered_generator();
      if (!g) throw Error(ErrorKind::kInvalidArgument, "emu:gen: this program has no generator (generated.h)");
      generated_ = g->open(cfg.gen, lba_bytes_);
      read_only_ = true;
      break;
    }
  }
  blocks_ = bytes >> lba_shift_;
}

uint64_t Namespace::open_file(const NamespaceConfig& cfg) {
  read_only_ = cfg.read_only;
  bool created = false;
  for (int attempt = 0; attempt < 2; ++attempt) {  // a second try when another process created it meanwhile
    fd_ = ::open(path_.c_str(), (read_only_ ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (fd_ >= 0 || errno != ENOENT || read_only_) break;
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    created = fd_ >= 0;
    if (fd_ >= 0 || errno != EEXIST) break;
  }
  if (fd_ < 0) io_error("cannot open " + path_ + (read_only_ ? " for reading" : ""));
  // On failure: close, and remove a file this call created, so a refused size leaves nothing behind.
  auto fail = [&](ErrorKind kind, const std::string& what) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    if (created) ::unlink(path_.c_str());
    throw Error(kind, "emu: " + what + (kind == ErrorKind::kIo ? std::string(": ") + std::strerror(e) : ""));
  };
  struct stat st{};
  if (::fstat(fd_, &st) != 0) fail(ErrorKind::kIo, "fstat " + path_);
  uint64_t have = uint64_t(st.st_size);
  if (S_ISBLK(st.st_mode) && ::ioctl(fd_, BLKGETSIZE64, &have) != 0) fail(ErrorKind::kIo, "BLKGETSIZE64 " + path_);
  file_bytes_ = have;
  uint64_t bytes = cfg.size_bytes;
  if (bytes == 0) {
    // Whole blocks covering the file: a GGUF is rarely a multiple of the block size, and its last tensor
    // ends in the last, partial block. The part of that block past the end of the file reads as zeros.
    bytes = (have + lba_bytes_ - 1) / lba_bytes_ * lba_bytes_;
    if (bytes == 0) {
      fail(ErrorKind::kInvalidArgument, path_ + " holds less than one " + std::to_string(lba_bytes_) +
                                            "-byte block; pass size=... to extend it");
    }
  } else if (have < bytes && !read_only_) {
    // Read-only opens never extend: the part past the end of the file reads as zeros instead.
    if (!S_ISREG(st.st_mode) || ::ftruncate(fd_, off_t(bytes)) != 0) {
      fail(ErrorKind::kIo, "cannot extend " + path_ + " to " + std::to_string(bytes) + " bytes");
    }
    file_bytes_ = bytes;
  }
  return bytes;
}

Namespace::~Namespace() {
  if (ram_ != nullptr) ::munmap(ram_, ram_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

bool Namespace::read(uint64_t off, const iovec* iov, int n) {
  switch (backing_) {
    case Backing::kNull:
      return true;
    case Backing::kRam:
      for (int i = 0; i < n; ++i) {
        std::memcpy(iov[i].iov_base, ram_ + off, iov[i].iov_len);
        off += iov[i].iov_len;
      }
      return true;
    case Backing::kFile:
      return vector_io([this](const iovec* v, int c, off_t o) { return ::preadv(fd_, v, c, o); }, off, iov, n,
                       off + iov_bytes(iov, n) > file_bytes_);
    case Backing::kGenerated:
      for (int i = 0; i < n; ++i) {
        generated_->read(off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
      }
      return true;
  }
  return false;
}

bool Namespace::write(uint64_t off, const iovec* iov, int n) {
  switch (backing_) {
    case Backing::kGenerated:  // write_protected(): exec_io refuses first
      return false;
    case Backing::kNull:
      return true;
    case Backing::kRam:
      for (int i = 0; i < n; ++i) {
        std::memcpy(ram_ + off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
      }
      return true;
    case Backing::kFile: {
      const uint64_t start = off;
      const uint64_t len = iov_bytes(iov, n);
      if (!vector_io([this](const iovec* v, int c, off_t o) { return ::pwritev(fd_, v, c, o); }, off, iov, n))
        return false;
      if (write_through_.load(std::memory_order_relaxed))
        return ::sync_file_range(fd_, off_t(start), off_t(len),
                                 SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) == 0 &&
               ::fdatasync(fd_) == 0;
      return true;
    }
  }
  return false;
}

bool Namespace::write_zeroes(uint64_t off, uint64_t len) {
  switch (backing_) {
    case Backing::kGenerated:
      return false;
    case Backing::kNull:
      return true;
    case Backing::kRam:
      std::memset(ram_ + off, 0, len);
      return true;
    case Backing::kFile: {
      if (::fallocate(fd_, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, off_t(off), off_t(len)) == 0) return true;
      static const char zeros[65536] = {};
      while (len > 0) {
        const size_t n = len < sizeof zeros ? size_t(len) : sizeof zeros;
        const ssize_t w = ::pwrite(fd_, zeros, n, off_t(off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        off += uint64_t(w);
        len -= uint64_t(w);
      }
      return true;
    }
  }
  return false;
}

bool Namespace::flush() { return backing_ != Backing::kFile || ::fdatasync(fd_) == 0; }

}  // namespace gpunvme::emu
