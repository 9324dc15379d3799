// Edits of a deployed model's namespace image for the load-check tests (CPU and GPU suites), done on
// the image file as a careless user or a failing drive would: bytes of a tensor flipped, a header
// value changed, both after the deploy (the record's CRCs then no longer match). And one edit the
// tests need to reach chunks beyond the header with a small model: the record rewritten with chunks of
// 2^shift bytes (the deploy's are 64 MiB; the record format takes any shift >= 9), its CRCs computed
// from the image's bytes.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/gguf/byte_source.h"
#include "runtime/model/deploy_record.h"

namespace gpunvme::test {

inline void pwrite_all(const std::string& path, uint64_t at, const void* p, size_t n) {
  const int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0 || ::pwrite(fd, p, n, off_t(at)) != ssize_t(n)) throw std::runtime_error("cannot write " + path);
  ::close(fd);
}

inline std::vector<uint8_t> pread_all(const std::string& path, uint64_t at, size_t n) {
  std::vector<uint8_t> b(n);
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0 || ::pread(fd, b.data(), n, off_t(at)) != ssize_t(n)) throw std::runtime_error("cannot read " + path);
  ::close(fd);
  return b;
}

// The deploy record at LBA 0 of the image (512- or 4096-byte blocks).
inline model::DeployRecord read_record(const std::string& image) {
  for (uint32_t lba : {512u, 4096u}) {
    const auto b = pread_all(image, 0, lba);
    try {
      return model::parse_record(b, 0);
    } catch (const std::exception&) {
    }
  }
  throw std::runtime_error(image + " holds no deploy record");
}

inline uint64_t model_byte(const model::DeployRecord& r, uint64_t offset) { return r.model_start_lba * r.lba_size + offset; }

// The record rewritten with chunks of 2^shift bytes, CRCs from the image's current bytes.
inline model::DeployRecord rechunk(const std::string& image, uint32_t shift) {
  model::DeployRecord r = read_record(image);
  gguf::FileSource file(image);
  gguf::CallbackSource src([&](uint64_t off, void* dst, size_t n) { return file.read(model_byte(r, off), dst, n); },
                           r.model_bytes);
  r.chunk_shift = shift;
  r.chunk_crcs = model::compute_chunk_crcs(src, r.model_bytes, shift);
  const std::vector<uint8_t> block = model::serialize_record(r);
  pwrite_all(image, 0, block.data(), block.size());
  return r;
}

// Every bit of model bytes [offset, offset + n) flipped, the record left as it is.
inline void flip_bytes(const std::string& image, uint64_t offset, uint64_t n) {
  const model::DeployRecord r = read_record(image);
  std::vector<uint8_t> b = pread_all(image, model_byte(r, offset), n);
  for (uint8_t& x : b) x ^= 0xFF;
  pwrite_all(image, model_byte(r, offset), b.data(), b.size());
}

// The integer value of metadata key `key` (a u32/i32/u64/i64 right after its name in the header)
// set to `value`, the record left as it is.
inline void set_header_int(const std::string& image, const std::string& key, uint64_t value) {
  const model::DeployRecord r = read_record(image);
  const std::vector<uint8_t> head = pread_all(image, model_byte(r, 0), std::min<uint64_t>(r.model_bytes, 1u << 20));
  const std::string h(head.begin(), head.end());
  const size_t at = h.find(key);
  if (at == std::string::npos) throw std::runtime_error(key + " is not in the header");
  uint32_t type = 0;
  std::memcpy(&type, head.data() + at + key.size(), 4);
  const uint64_t off = model_byte(r, at + key.size() + 4);
  if (type == 4 || type == 5) {
    const uint32_t v = uint32_t(value);
    pwrite_all(image, off, &v, 4);
  } else if (type == 10 || type == 11) {
    pwrite_all(image, off, &value, 8);
  } else {
    throw std::runtime_error(key + " is not an integer of 4 or 8 bytes");
  }
}

// The first chunk of 2^shift bytes wholly inside model bytes [begin, end), and an offset 5000 bytes
// into it, where a 4 KiB flip touches that chunk alone (shift >= 14). Throws when none fits.
struct FlipSpot {
  uint64_t chunk = 0, offset = 0;
};
inline FlipSpot flip_spot(uint64_t begin, uint64_t end, uint32_t shift) {
  const uint64_t c = (begin >> shift) + 1;
  if (((c + 1) << shift) > end || shift < 14) throw std::logic_error("no whole chunk to flip bytes in");
  return {c, (c << shift) + 5000};
}

// What `f` threw, or "" when it did not.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace gpunvme::test
