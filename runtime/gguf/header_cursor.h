// Sequential reader over a ByteSource for the GGUF header. It pulls bytes through a sliding window
// that grows by doubling (64 KiB .. 4 MiB per read), so opening a 100 GB model touches only the
// header, and every length is checked against the bytes left in the source *before* anything is
// allocated for it. Truncation errors name the item, the byte offset and the source.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "runtime/gguf/byte_source.h"

namespace gpunvme::gguf {

class HeaderCursor {
 public:
  explicit HeaderCursor(ByteSource& src) : src_(src), size_(src.size()) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t remaining() const { return pos_ <= size_ ? size_ - pos_ : 0; }
  // Bytes pulled from the source so far (the header, plus at most one read-ahead chunk).
  uint64_t bytes_read() const { return bytes_read_; }

  // Describes the item being parsed ("metadata entry 3 (key 'general.name')"); used only on error.
  void set_context(std::function<std::string()> ctx) { context_ = std::move(ctx); }
  std::string context() const { return context_ ? context_() : std::string("the header"); }

  // Returns a pointer to the next n bytes and advances; throws GgufError naming `item` if the
  // source ends first. The pointer is valid until the next call.
  const uint8_t* take(size_t n, const char* item);

  template <class T> T read(const char* item) {
    T v;
    std::memcpy(&v, take(sizeof(T), item), sizeof(T));  // little-endian host (static_assert in metadata.cpp)
    return v;
  }

  // GGUF string: uint64 length + bytes, no terminator.
  std::string read_string(const char* item);

  [[noreturn]] void fail_truncated(uint64_t need, const char* item) const;

 private:
  void fill(uint64_t need_end, const char* item);

  ByteSource& src_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t bytes_read_ = 0;
  std::vector<uint8_t> win_;  // bytes [base_, base_ + win_.size()) of the source
  uint64_t base_ = 0;
  size_t chunk_ = 64 * 1024;
  std::function<std::string()> context_;
};

}  // namespace gpunvme::gguf
