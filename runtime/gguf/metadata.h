// GGUF metadata values (docs/gguf.md "gguf_metadata_value_type"). Scalars are kept as their raw
// little-endian bits, strings as bytes (GGUF strings are UTF-8 but are not validated by ggml either),
// arrays as packed raw elements (cheap for the 262k-entry token-score arrays), strings or nested arrays.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/gguf/gguf_error.h"

namespace gpunvme::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

// "UINT32", "ARRAY", or "unknown value type 13".
std::string value_type_name(uint32_t t);
// Bytes of one scalar element, 0 for STRING/ARRAY.
size_t scalar_size(ValueType t);

class Value;

// Array elements of one type; nested arrays may differ in element type from each other.
struct Array {
  ValueType elem_type = ValueType::UINT8;
  uint64_t count = 0;
  std::vector<uint8_t> raw;          // scalar elements, packed little-endian as in the file
  std::vector<std::string> strings;  // elem_type == STRING
  std::vector<Array> arrays;         // elem_type == ARRAY

  // Element i of a scalar array as a Value (bounds- and type-checked).
  Value at(uint64_t i) const;
};

class Value {
 public:
  Value() = default;
  static Value scalar(ValueType t, uint64_t bits) { Value v; v.type_ = t; v.bits_ = bits; return v; }
  static Value string(std::string s) { Value v; v.type_ = ValueType::STRING; v.str_ = std::move(s); return v; }
  static Value array(Array a);

  ValueType type() const { return type_; }

  // Strict getters: the stored type must be exactly T's GGUF type, else GgufError naming both.
  // T in uint8_t..int64_t, float, double, bool, std::string.
  template <class T> T as() const;
  // Any integer type (signed ones must be >= 0) widened to uint64; else GgufError.
  uint64_t as_uint() const;
  // Any integer type widened to int64 (UINT64 above INT64_MAX is an error).
  int64_t as_int() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  uint64_t raw_bits() const { return bits_; }

 private:
  ValueType type_ = ValueType::UINT8;
  uint64_t bits_ = 0;
  std::string str_;
  std::vector<Array> arr_;  // exactly one element when type_ == ARRAY (vector breaks the recursion)
};


class Metadata {
 public:
  // Insertion keeps file order; a duplicate key is a GgufError (ggml rejects those too).
  void add(std::string key, Value v, uint64_t at_offset);
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

  const Value* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  // Missing key or wrong type -> GgufError naming the key.
  const Value& at(std::string_view key) const;
  template <class T> T get(std::string_view key) const;
  template <class T> std::optional<T> get_optional(std::string_view key) const {
    if (!contains(key)) return std::nullopt;
    return get<T>(key);
  }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace gpunvme::gguf
