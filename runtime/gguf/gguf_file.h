// A parsed GGUF header (versions 2 and 3, little-endian): metadata, tensor infos and the layout of
// the data section. Only the header is read; tensor data is never touched.
//
// File layout (ggml docs/gguf.md):
//   uint32 magic "GGUF" | uint32 version | uint64 tensor_count | uint64 metadata_kv_count
//   metadata_kv[kv_count]      { gguf_string key; uint32 value_type; value }
//   tensor_info[tensor_count]  { gguf_string name; uint32 n_dims; uint64 ne[n_dims]; uint32 ggml_type;
//                                uint64 offset }      // offset is relative to the data section
//   padding to general.alignment (default 32), then the data section.
// Version 1 used 32-bit counts and is not supported; version 3 only added big-endian files, which
// this reader refuses with a clear error (the GPU path is little-endian).
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/gguf/byte_source.h"
#include "runtime/gguf/ggml_types.h"
#include "runtime/gguf/gguf_error.h"
#include "runtime/gguf/metadata.h"

namespace gpunvme::gguf {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
inline constexpr uint32_t kDefaultAlignment = 32;   // GGUF_DEFAULT_ALIGNMENT
inline constexpr uint32_t kMaxDims = 4;             // GGML_MAX_DIMS
inline constexpr uint32_t kMaxArrayNesting = 16;    // our bound; keeps hostile nesting off the stack

struct TensorInfo {
  std::string name;
  uint32_t n_dims = 0;
  std::array<uint64_t, kMaxDims> ne{1, 1, 1, 1};  // ne[0] is the innermost (row) dimension
  uint32_t type_id = 0;
  GgmlTypeInfo type{};
  uint64_t offset = 0;       // relative to the data section, as stored
  uint64_t file_offset = 0;  // absolute: data_offset + offset
  uint64_t size_bytes = 0;   // ne0/block_size * type_size * ne1 * ne2 * ne3
  uint64_t n_elements = 0;
  uint64_t info_offset = 0;  // byte offset of this tensor info in the header (for messages)

  uint64_t file_end() const { return file_offset + size_bytes; }
};

class GgufFile {
 public:
  // Reads the header of a host file (pread, incremental; never maps or reads the data section).
  static GgufFile open(const std::string& path);
  // Parses a complete or header-only buffer; `bytes.size()` is taken as the file size.
  static GgufFile parse(std::span<const uint8_t> bytes);
  // Any byte source, e.g. a callback reading the namespace through the driver.
  static GgufFile read(ByteSource& src);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t header_size() const { return header_size_; }  // end of the tensor infos, before padding
  uint64_t data_offset() const { return data_offset_; }  // start of the data section (aligned)
  uint64_t file_size() const { return file_size_; }
  // End of the last tensor's bytes (data_offset when there are none): the bytes a deployment needs.
  uint64_t data_end() const { return data_end_; }
  // Bytes pulled from the source while parsing (header + read-ahead); for the "header-only" tests.
  uint64_t bytes_read() const { return bytes_read_; }

  const Metadata& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // general.name if present as a string, else "".
  std::string model_name() const;
  // general.architecture if present as a string, else "".
  std::string architecture() const;

 private:
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t header_size_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t file_size_ = 0;
  uint64_t data_end_ = 0;
  uint64_t bytes_read_ = 0;
  Metadata metadata_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> by_name_;

  friend class GgufParser;
};

// Byte size of `ne` elements of a type (ne0 must be a multiple of the block size). Throws
// GgufError naming `what` (usually the tensor) on a bad shape or overflow.
uint64_t ggml_nbytes(const GgmlTypeInfo& type, const std::array<uint64_t, kMaxDims>& ne, const std::string& what);

}  // namespace gpunvme::gguf
