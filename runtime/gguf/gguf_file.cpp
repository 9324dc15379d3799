#include "runtime/gguf/gguf_file.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <limits>

#include "host/text/escape.h"
#include "runtime/gguf/header_cursor.h"

namespace gpunvme::gguf {

namespace {

std::string off(uint64_t o) { return "byte offset " + std::to_string(o); }

// A key or tensor name from the file, quoted for an error message: escaped, so a hostile file cannot
// put terminal escapes or forged lines into what a tool prints.
std::string quoted(std::string_view name) { return "'" + text::printable(name) + "'"; }

std::string hex_bytes(const uint8_t* p, size_t n) {
  std::string s;
  char buf[8];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%s%02x", i ? " " : "", p[i]);
    s += buf;
  }
  return s;
}

bool mul_ok(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

// Smallest encoding of one value of each type: a bound used to reject hostile counts before
// allocating anything for them (a count can never exceed remaining_bytes / min_size).
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::STRING: return 8;      // uint64 length, empty string
    case ValueType::ARRAY: return 4 + 8;   // element type + count, empty array
    default: return scalar_size(t);
  }
}

}  // namespace

uint64_t ggml_nbytes(const GgmlTypeInfo& type, const std::array<uint64_t, kMaxDims>& ne, const std::string& what) {
  if (ne[0] % type.block_size != 0) {
    throw GgufError(what + " has type " + std::string(type.name) + " and ne[0] = " + std::to_string(ne[0]) +
                    ", which is not a multiple of the type's block size " + std::to_string(type.block_size) +
                    "; the file is corrupt or was written by a broken converter");
  }
  uint64_t bytes = ne[0] / type.block_size;
  bool ok = mul_ok(bytes, type.type_size, bytes);
  for (size_t i = 1; i < kMaxDims && ok; ++i) ok = mul_ok(bytes, ne[i], bytes);
  if (!ok) throw GgufError(what + " has dimensions whose byte size overflows 64 bits; the file is corrupt");
  return bytes;
}

class GgufParser {
 public:
  explicit GgufParser(ByteSource& src) : src_(src), c_(src) {}

  GgufFile run() {
    GgufFile f;
    f.file_size_ = c_.size();
    parse_preamble(f);
    parse_metadata(f);
    resolve_alignment(f);
    parse_tensor_infos(f);
    layout_data(f);
    f.bytes_read_ = c_.bytes_read();
    return f;
  }

 private:
  void parse_preamble(GgufFile& f) {
    c_.set_context([] { return std::string("the file preamble"); });
    if (c_.size() < 4) {
      throw GgufError(src_.describe() + " is " + std::to_string(c_.size()) +
                      " bytes long, too short to be a GGUF file (no magic)");
    }
    const uint8_t* m = c_.take(4, "the magic");
    if (m[0] == 'F' && m[1] == 'U' && m[2] == 'G' && m[3] == 'G') {
      throw GgufError(src_.describe() + " has its GGUF magic byte-swapped (\"FUGG\"): it is a big-endian file. "
                      "Only little-endian GGUF is supported; convert it with a little-endian writer");
    }
    if (!(m[0] == 'G' && m[1] == 'G' && m[2] == 'U' && m[3] == 'F')) {
      throw GgufError(src_.describe() + " is not a GGUF file: bytes 0..3 are [" + hex_bytes(m, 4) +
                      "], expected \"GGUF\" [47 47 55 46]");
    }
    uint32_t v = c_.read<uint32_t>("the version");
    if ((v & 0xFFFFu) == 0 && (v >> 16) != 0) {
      uint32_t swapped = __builtin_bswap32(v);
      throw GgufError(src_.describe() + " is a big-endian GGUF file (version field reads " + std::to_string(v) +
                      " little-endian, " + std::to_string(swapped) +
                      " byte-swapped); only little-endian GGUF is supported");
    }
    if (v == 1) {
      throw GgufError(src_.describe() + " is GGUF version 1 (32-bit counts), which is not supported; "
                      "re-convert it with a current llama.cpp (versions 2 and 3 are supported)");
    }
    if (v != 2 && v != 3) {
      throw GgufError(src_.describe() + " has GGUF version " + std::to_string(v) +
                      ", this reader supports versions 2 and 3");
    }
    f.version_ = v;
    n_tensors_ = c_.read<uint64_t>("the tensor count");
    n_kv_ = c_.read<uint64_t>("the metadata count");
    // Lower bounds on the encoded sizes (see min_encoded_size): 8+4+1 per kv, 8+4+4+8 per tensor.
    if (n_kv_ > c_.remaining() / 13) {
      throw GgufError("metadata count " + std::to_string(n_kv_) + " at " + off(16) + " cannot fit in the " +
                      std::to_string(c_.remaining()) + " bytes left in " + src_.describe() +
                      "; the file is truncated or corrupt");
    }
    if (n_tensors_ > c_.remaining() / 24) {
      throw GgufError("tensor count " + std::to_string(n_tensors_) + " at " + off(8) + " cannot fit in the " +
                      std::to_string(c_.remaining()) + " bytes left in " + src_.describe() +
                      "; the file is truncated or corrupt");
    }
  }

  void parse_metadata(GgufFile& f) {
    for (uint64_t i = 0; i < n_kv_; ++i) {
      uint64_t at = c_.pos();
      c_.set_context([i, at] { return "metadata entry " + std::to_string(i) + " (at " + off(at) + ")"; });
      std::string key = c_.read_string("the key");
      c_.set_context([i, at, &key] {
        return "metadata entry " + std::to_string(i) + " " + quoted(key) + " (at " + off(at) + ")";
      });
      uint64_t type_at = c_.pos();
      uint32_t t = c_.read<uint32_t>("the value type");
      Value v = read_value(t, type_at, 0);
      f.metadata_.add(std::move(key), std::move(v), at);
    }
  }

  void check_type(uint32_t t, uint64_t at) {
    if (t > static_cast<uint32_t>(ValueType::FLOAT64)) {
      throw GgufError("unknown metadata value type " + std::to_string(t) + " at " + off(at) + " in " +
                      c_.context() + "; the file is corrupt or newer than this reader");
    }
  }

  Value read_value(uint32_t t, uint64_t type_at, uint32_t depth) {
    check_type(t, type_at);
    auto vt = static_cast<ValueType>(t);
    if (vt == ValueType::STRING) return Value::string(c_.read_string("a string value"));
    if (vt == ValueType::ARRAY) return Value::array(read_array(depth));
    uint64_t bits = 0;
    std::memcpy(&bits, c_.take(scalar_size(vt), "a scalar value"), scalar_size(vt));
    return Value::scalar(vt, bits);
  }

  Array read_array(uint32_t depth) {
    if (depth >= kMaxArrayNesting) {
      throw GgufError("arrays nested deeper than " + std::to_string(kMaxArrayNesting) + " levels at " +
                      off(c_.pos()) + " in " + c_.context() + "; the file is corrupt");
    }
    Array a;
    uint64_t type_at = c_.pos();
    uint32_t et = c_.read<uint32_t>("an array element type");
    check_type(et, type_at);
    a.elem_type = static_cast<ValueType>(et);
    uint64_t count_at = c_.pos();
    a.count = c_.read<uint64_t>("an array length");
    uint64_t min = min_encoded_size(a.elem_type);
    if (a.count > c_.remaining() / min) {
      throw GgufError("array of " + std::to_string(a.count) + " " + value_type_name(et) + " elements at " +
                      off(count_at) + " in " + c_.context() + " cannot fit in the " +
                      std::to_string(c_.remaining()) + " bytes left; the file is truncated or corrupt");
    }
    switch (a.elem_type) {
      case ValueType::STRING:
        a.strings.reserve(static_cast<size_t>(a.count));  // bounded: count <= remaining / 8
        for (uint64_t i = 0; i < a.count; ++i) a.strings.push_back(c_.read_string("an array string"));
        break;
      case ValueType::ARRAY:
        for (uint64_t i = 0; i < a.count; ++i) a.arrays.push_back(read_array(depth + 1));
        break;
      default: {
        size_t n = static_cast<size_t>(a.count * min);  // no overflow: count <= remaining / min
        const uint8_t* p = c_.take(n, "array elements");
        a.raw.assign(p, p + n);
      }
    }
    return a;
  }

  void resolve_alignment(GgufFile& f) {
    const Value* v = f.metadata_.find("general.alignment");
    if (v == nullptr) return;
    if (v->type() != ValueType::UINT32) {
      throw GgufError("metadata key 'general.alignment' has type " +
                      value_type_name(static_cast<uint32_t>(v->type())) + ", GGUF requires UINT32");
    }
    uint32_t a = v->as<uint32_t>();
    if (a == 0 || !std::has_single_bit(a)) {
      throw GgufError("general.alignment is " + std::to_string(a) + ", GGUF requires a non-zero power of two");
    }
    f.alignment_ = a;
  }

  void parse_tensor_infos(GgufFile& f) {
    f.tensors_.reserve(static_cast<size_t>(n_tensors_));  // bounded: n_tensors <= remaining / 24
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      TensorInfo t;
      t.info_offset = c_.pos();
      uint64_t at = t.info_offset;
      c_.set_context([i, at] { return "tensor info " + std::to_string(i) + " (at " + off(at) + ")"; });
      t.name = c_.read_string("the name");
      const std::string& name = t.name;
      c_.set_context([at, &name] { return "tensor " + quoted(name) + " (info at " + off(at) + ")"; });
      std::string what = "tensor " + quoted(t.name) + " (info at " + off(at) + ")";
      t.n_dims = c_.read<uint32_t>("n_dims");
      if (t.n_dims > kMaxDims) {
        throw GgufError(what + " has n_dims = " + std::to_string(t.n_dims) + ", GGUF allows at most " +
                        std::to_string(kMaxDims) + " (GGML_MAX_DIMS)");
      }
      for (uint32_t d = 0; d < t.n_dims; ++d) {
        t.ne[d] = c_.read<uint64_t>("a dimension");
        if (t.ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          throw GgufError(what + " has dimension " + std::to_string(d) + " = " + std::to_string(t.ne[d]) +
                          ", larger than INT64_MAX; the file is corrupt");
        }
      }
      bool ok = true;
      t.n_elements = 1;
      for (uint32_t d = 0; d < kMaxDims && ok; ++d) ok = mul_ok(t.n_elements, t.ne[d], t.n_elements);
      if (!ok || t.n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw GgufError(what + " has an element count that overflows int64; the file is corrupt");
      }
      t.type_id = c_.read<uint32_t>("the ggml type");
      auto info = ggml_type_info(t.type_id);
      if (!info) throw GgufError(what + " has " + ggml_type_name(t.type_id));
      t.type = *info;
      t.offset = c_.read<uint64_t>("the data offset");
      t.size_bytes = ggml_nbytes(t.type, t.ne, what);
      if (t.offset % f.alignment_ != 0) {
        throw GgufError(what + " has data offset " + std::to_string(t.offset) +
                        ", not a multiple of the file's alignment " + std::to_string(f.alignment_) +
                        "; the file is corrupt");
      }
      if (!f.by_name_.emplace(t.name, f.tensors_.size()).second) {
        throw GgufError("duplicate tensor name " + quoted(t.name) + " (second info at " + off(at) +
                        "); the file is corrupt");
      }
      f.tensors_.push_back(std::move(t));
    }
    c_.set_context({});
    f.header_size_ = c_.pos();
  }

  void layout_data(GgufFile& f) {
    uint64_t a = f.alignment_;
    uint64_t h = f.header_size_;
    if (h > std::numeric_limits<uint64_t>::max() - a) throw GgufError("header size overflows");
    f.data_offset_ = (h + a - 1) / a * a;
    f.data_end_ = f.data_offset_;
    for (auto& t : f.tensors_) {
      if (__builtin_add_overflow(f.data_offset_, t.offset, &t.file_offset) ||
          t.file_offset > std::numeric_limits<uint64_t>::max() - t.size_bytes) {
        throw GgufError("tensor " + quoted(t.name) + " has data offset " + std::to_string(t.offset) +
                        " that overflows 64 bits; the file is corrupt");
      }
      if (t.file_end() > f.file_size_) {
        throw GgufError("GGUF file is truncated: tensor " + quoted(t.name) + " data spans bytes [" +
                        std::to_string(t.file_offset) + ", " + std::to_string(t.file_end()) + ") but " +
                        src_.describe() + " has " + std::to_string(f.file_size_) +
                        " bytes; was the download or the dd copy complete?");
      }
      f.data_end_ = std::max(f.data_end_, t.file_end());
    }
    // Overlap check on offset order (tensors need not be stored in info order).
    std::vector<const TensorInfo*> order;
    order.reserve(f.tensors_.size());
    for (const auto& t : f.tensors_) order.push_back(&t);
    std::sort(order.begin(), order.end(),
              [](const TensorInfo* x, const TensorInfo* y) { return x->offset < y->offset; });
    const TensorInfo* prev = nullptr;  // the tensor reaching furthest so far
    for (const TensorInfo* cur : order) {
      if (cur->size_bytes == 0) continue;
      if (prev != nullptr && cur->file_offset < prev->file_end()) {
        const TensorInfo& p = *prev;
        const TensorInfo& q = *cur;
        throw GgufError("tensors " + quoted(p.name) + " [" + std::to_string(p.file_offset) + ", " +
                        std::to_string(p.file_end()) + ") and " + quoted(q.name) + " [" + std::to_string(q.file_offset) +
                        ", " + std::to_string(q.file_end()) + ") overlap in the data section; the file is corrupt");
      }
      if (prev == nullptr || cur->file_end() > prev->file_end()) prev = cur;
    }
  }

  ByteSource& src_;
  HeaderCursor c_;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
};

GgufFile GgufFile::read(ByteSource& src) { return GgufParser(src).run(); }

GgufFile GgufFile::open(const std::string& path) {
  FileSource src(path);
  return read(src);
}

GgufFile GgufFile::parse(std::span<const uint8_t> bytes) {
  MemorySource src(bytes);
  return read(src);
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

std::string GgufFile::model_name() const {
  const Value* v = metadata_.find("general.name");
  return v != nullptr && v->type() == ValueType::STRING ? v->as_string() : std::string();
}

std::string GgufFile::architecture() const {
  const Value* v = metadata_.find("general.architecture");
  return v != nullptr && v->type() == ValueType::STRING ? v->as_string() : std::string();
}

}  // namespace gpunvme::gguf
