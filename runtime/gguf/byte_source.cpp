#include "runtime/gguf/byte_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/gguf/gguf_error.h"

namespace gpunvme::gguf {

size_t MemorySource::read(uint64_t offset, void* dst, size_t len) {
  if (offset >= bytes_.size()) return 0;
  size_t n = static_cast<size_t>(std::min<uint64_t>(len, bytes_.size() - offset));
  if (n != 0) std::memcpy(dst, bytes_.data() + offset, n);
  return n;
}

FileSource::FileSource(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    throw GgufError("cannot open GGUF file '" + path + "': " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int e = errno;
    ::close(fd_);
    throw GgufError("cannot stat GGUF file '" + path + "': " + std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd_);
    throw GgufError("'" + path + "' is a directory, not a GGUF file");
  }
  if (S_ISBLK(st.st_mode)) {
    // st_size is 0 for block devices; the end is where lseek(SEEK_END) lands.
    off_t end = ::lseek(fd_, 0, SEEK_END);
    size_ = end > 0 ? static_cast<uint64_t>(end) : 0;
  } else {
    size_ = static_cast<uint64_t>(st.st_size);
  }
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

size_t FileSource::read(uint64_t offset, void* dst, size_t len) {
  size_t done = 0;
  auto* p = static_cast<uint8_t*>(dst);
  while (done < len) {
    ssize_t r = ::pread(fd_, p + done, len - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw GgufError("read of '" + path_ + "' at byte " + std::to_string(offset + done) +
                      " failed: " + std::strerror(errno));
    }
    if (r == 0) break;  // end of file
    done += static_cast<size_t>(r);
  }
  return done;
}

}  // namespace gpunvme::gguf
