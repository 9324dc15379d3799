#include "runtime/gguf/header_cursor.h"

#include <algorithm>

#include "runtime/gguf/gguf_error.h"

namespace gpunvme::gguf {
namespace {
constexpr size_t kMaxChunk = 4u << 20;
}

void HeaderCursor::fail_truncated(uint64_t need, const char* item) const {
  throw GgufError("GGUF file is truncated: reading " + std::string(item) + " of " + context() + " needs " +
                  std::to_string(need) + " bytes at byte offset " + std::to_string(pos_) + " but " +
                  src_.describe() + " has only " + std::to_string(size_) +
                  " bytes; was the download or the dd copy complete?");
}

void HeaderCursor::fill(uint64_t need_end, const char* item) {
  // Drop what was consumed, keep the unread tail, then append enough bytes for the request
  // plus read-ahead (bounded by the source end).
  size_t keep_from = static_cast<size_t>(pos_ - base_);
  win_.erase(win_.begin(), win_.begin() + static_cast<std::ptrdiff_t>(std::min(keep_from, win_.size())));
  base_ = pos_;
  uint64_t have_end = base_ + win_.size();
  uint64_t want_end = std::min<uint64_t>(size_, std::max<uint64_t>(need_end, have_end + chunk_));
  size_t add = static_cast<size_t>(want_end - have_end);
  size_t old = win_.size();
  win_.resize(old + add);
  size_t got = src_.read(have_end, win_.data() + old, add);
  bytes_read_ += got;
  win_.resize(old + got);
  chunk_ = std::min(chunk_ * 2, kMaxChunk);
  if (base_ + win_.size() < need_end) {
    // The source delivered less than its size promised (file shrank, device read short).
    throw GgufError("short read from " + src_.describe() + " at byte offset " + std::to_string(have_end) +
                    " while reading " + item + " of " + context() + ": wanted " + std::to_string(add) +
                    " bytes, got " + std::to_string(got));
  }
}

const uint8_t* HeaderCursor::take(size_t n, const char* item) {
  if (n > remaining()) fail_truncated(n, item);
  uint64_t end = pos_ + n;
  if (end > base_ + win_.size()) fill(end, item);
  const uint8_t* p = win_.data() + (pos_ - base_);
  pos_ = end;
  return p;
}

std::string HeaderCursor::read_string(const char* item) {
  uint64_t len = read<uint64_t>(item);
  if (len > remaining()) {
    uint64_t at = pos_ - 8;
    throw GgufError("string length " + std::to_string(len) + " of " + std::string(item) + " in " + context() +
                    " at byte offset " + std::to_string(at) + " is larger than the " + std::to_string(remaining()) +
                    " bytes left in " + src_.describe() + "; the file is truncated or corrupt");
  }
  const uint8_t* p = take(static_cast<size_t>(len), item);
  return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
}

}  // namespace gpunvme::gguf
