// Writes GGUF bytes: valid files of any shape (the examples' generated models, the test fixtures)
// and, for the parser's tests, malformed ones (every field can be overridden). Independent of the
// parser (gguf_file.h), so the tests do not check the parser against itself.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpunvme::gguf::builder {

struct Bytes {
  std::vector<uint8_t> b;
  template <class T> Bytes& put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));  // little-endian host
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  Bytes& str(std::string_view s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  size_t size() const { return b.size(); }
};

// Value type ids (docs/gguf.md).
enum : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 };

struct Tensor {
  Tensor(std::string n, std::vector<uint64_t> dims, uint32_t t, uint64_t bytes, std::optional<uint64_t> off = {})
      : name(std::move(n)), ne(std::move(dims)), type(t), nbytes(bytes), offset(off) {}
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;                  // ggml type id
  uint64_t nbytes = 0;                // data bytes to reserve (caller computes)
  std::optional<uint64_t> offset;     // default: next aligned offset
};

struct Spec {
  uint32_t version = 3;
  uint32_t alignment = 32;            // used for layout; written as general.alignment if write_alignment
  bool write_alignment = false;
  std::vector<std::function<void(Bytes&)>> kvs;  // each writes one full key/value entry
  std::vector<Tensor> tensors;
  bool data = true;                   // false: header (+ padding) only, for sparse files
  std::optional<uint64_t> n_kv_override, n_tensors_override;
};

inline std::function<void(Bytes&)> kv_u32(std::string k, uint32_t v) {
  return [=](Bytes& b) { b.str(k).put<uint32_t>(U32).put<uint32_t>(v); };
}
inline std::function<void(Bytes&)> kv_str(std::string k, std::string v) {
  return [=](Bytes& b) { b.str(k).put<uint32_t>(STR).str(v); };
}
// Raw: key, then whatever `body` writes (type id + value).
inline std::function<void(Bytes&)> kv_raw(std::string k, std::function<void(Bytes&)> body) {
  return [=](Bytes& b) { b.str(k); body(b); };
}

struct Built {
  std::vector<uint8_t> bytes;
  uint64_t header_size = 0;
  uint64_t data_offset = 0;
  std::vector<uint64_t> offsets;  // relative offsets used
  uint64_t data_end = 0;          // absolute end of the last tensor
};

inline uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

inline Built build(const Spec& s) {
  Bytes b;
  b.b = {'G', 'G', 'U', 'F'};
  b.put<uint32_t>(s.version);
  b.put<uint64_t>(s.n_tensors_override.value_or(s.tensors.size()));
  b.put<uint64_t>(s.n_kv_override.value_or(s.kvs.size() + (s.write_alignment ? 1 : 0)));
  if (s.write_alignment) kv_u32("general.alignment", s.alignment)(b);
  for (const auto& kv : s.kvs) kv(b);
  Built out;
  uint64_t next = 0;
  for (const auto& t : s.tensors) {
    b.str(t.name);
    b.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) b.put<uint64_t>(d);
    b.put<uint32_t>(t.type);
    uint64_t off = t.offset.value_or(align_up(next, s.alignment));
    b.put<uint64_t>(off);
    out.offsets.push_back(off);
    next = std::max(next, off + t.nbytes);
  }
  out.header_size = b.size();
  out.data_offset = align_up(b.size(), s.alignment);
  out.data_end = out.data_offset + next;
  if (s.data) {
    b.b.resize(out.data_end, 0);
    for (uint64_t i = out.data_offset; i < out.data_end; ++i) b.b[i] = static_cast<uint8_t>(i * 131 + 7);
  } else {
    b.b.resize(out.data_offset, 0);
  }
  out.bytes = std::move(b.b);
  return out;
}

}  // namespace gpunvme::gguf::builder
