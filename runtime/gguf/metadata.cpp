#include "runtime/gguf/metadata.h"

#include <bit>
#include <cstring>
#include <limits>

#include "host/text/escape.h"

namespace gpunvme::gguf {

static_assert(std::endian::native == std::endian::little, "GGUF reader assumes a little-endian host");

std::string value_type_name(uint32_t t) {
  static const char* const kNames[] = {"UINT8", "INT8",   "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                                       "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64", "FLOAT64"};
  if (t < std::size(kNames)) return kNames[t];
  return "unknown value type " + std::to_string(t);
}

size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: case ValueType::ARRAY: return 0;
  }
  return 0;
}

Value Value::array(Array a) {
  Value v;
  v.type_ = ValueType::ARRAY;
  v.arr_.push_back(std::move(a));
  return v;
}

namespace {

template <class T> constexpr ValueType type_of();
template <> constexpr ValueType type_of<uint8_t>() { return ValueType::UINT8; }
template <> constexpr ValueType type_of<int8_t>() { return ValueType::INT8; }
template <> constexpr ValueType type_of<uint16_t>() { return ValueType::UINT16; }
template <> constexpr ValueType type_of<int16_t>() { return ValueType::INT16; }
template <> constexpr ValueType type_of<uint32_t>() { return ValueType::UINT32; }
template <> constexpr ValueType type_of<int32_t>() { return ValueType::INT32; }
template <> constexpr ValueType type_of<uint64_t>() { return ValueType::UINT64; }
template <> constexpr ValueType type_of<int64_t>() { return ValueType::INT64; }
template <> constexpr ValueType type_of<float>() { return ValueType::FLOAT32; }
template <> constexpr ValueType type_of<double>() { return ValueType::FLOAT64; }
template <> constexpr ValueType type_of<bool>() { return ValueType::BOOL; }
template <> constexpr ValueType type_of<std::string>() { return ValueType::STRING; }

[[noreturn]] void wrong_type(ValueType have, ValueType want) {
  throw GgufError("metadata value has type " + value_type_name(static_cast<uint32_t>(have)) + ", expected " +
                  value_type_name(static_cast<uint32_t>(want)));
}

}  // namespace

template <class T> T Value::as() const {
  constexpr ValueType want = type_of<T>();
  if (type_ != want) wrong_type(type_, want);
  if constexpr (std::is_same_v<T, std::string>) {
    return str_;
  } else if constexpr (std::is_same_v<T, bool>) {
    return bits_ != 0;
  } else {
    T out;
    std::memcpy(&out, &bits_, sizeof(T));  // bits_ holds the value's bytes in its low-order bytes
    return out;
  }
}

template uint8_t Value::as<uint8_t>() const;
template int8_t Value::as<int8_t>() const;
template uint16_t Value::as<uint16_t>() const;
template int16_t Value::as<int16_t>() const;
template uint32_t Value::as<uint32_t>() const;
template int32_t Value::as<int32_t>() const;
template uint64_t Value::as<uint64_t>() const;
template int64_t Value::as<int64_t>() const;
template float Value::as<float>() const;
template double Value::as<double>() const;
template bool Value::as<bool>() const;
template std::string Value::as<std::string>() const;

int64_t Value::as_int() const {
  switch (type_) {
    case ValueType::UINT8: return as<uint8_t>();
    case ValueType::INT8: return as<int8_t>();
    case ValueType::UINT16: return as<uint16_t>();
    case ValueType::INT16: return as<int16_t>();
    case ValueType::UINT32: return as<uint32_t>();
    case ValueType::INT32: return as<int32_t>();
    case ValueType::INT64: return as<int64_t>();
    case ValueType::UINT64:
      if (bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw GgufError("metadata UINT64 value " + std::to_string(bits_) + " does not fit a signed 64-bit integer");
      }
      return static_cast<int64_t>(bits_);
    default:
      throw GgufError("metadata value has type " + value_type_name(static_cast<uint32_t>(type_)) +
                      ", expected an integer type");
  }
}

uint64_t Value::as_uint() const {
  if (type_ == ValueType::UINT64) return bits_;
  int64_t v = as_int();
  if (v < 0) throw GgufError("metadata value " + std::to_string(v) + " is negative, expected a count");
  return static_cast<uint64_t>(v);
}

const std::string& Value::as_string() const {
  if (type_ != ValueType::STRING) wrong_type(type_, ValueType::STRING);
  return str_;
}

const Array& Value::as_array() const {
  if (type_ != ValueType::ARRAY) wrong_type(type_, ValueType::ARRAY);
  return arr_.front();
}

Value Array::at(uint64_t i) const {
  if (i >= count) {
    throw GgufError("array index " + std::to_string(i) + " out of range (array has " + std::to_string(count) +
                    " elements)");
  }
  if (elem_type == ValueType::STRING) return Value::string(strings[i]);
  if (elem_type == ValueType::ARRAY) return Value::array(arrays[i]);
  size_t sz = scalar_size(elem_type);
  uint64_t bits = 0;
  std::memcpy(&bits, raw.data() + i * sz, sz);
  return Value::scalar(elem_type, bits);
}

void Metadata::add(std::string key, Value v, uint64_t at_offset) {
  if (index_.count(key) != 0) {
    throw GgufError("duplicate metadata key '" + text::printable(key) + "' at byte offset " + std::to_string(at_offset) +
                    "; the file is malformed (ggml refuses it too)");
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(v));
}

const Value* Metadata::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Value& Metadata::at(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) throw GgufError("metadata key '" + std::string(key) + "' is missing");
  return *v;
}

template <class T> T Metadata::get(std::string_view key) const {
  const Value& v = at(key);
  if (v.type() != type_of<T>()) {
    throw GgufError("metadata key '" + std::string(key) + "' has type " +
                    value_type_name(static_cast<uint32_t>(v.type())) + ", expected " +
                    value_type_name(static_cast<uint32_t>(type_of<T>())));
  }
  return v.as<T>();
}

template uint8_t Metadata::get<uint8_t>(std::string_view) const;
template int8_t Metadata::get<int8_t>(std::string_view) const;
template uint16_t Metadata::get<uint16_t>(std::string_view) const;
template int16_t Metadata::get<int16_t>(std::string_view) const;
template uint32_t Metadata::get<uint32_t>(std::string_view) const;
template int32_t Metadata::get<int32_t>(std::string_view) const;
template uint64_t Metadata::get<uint64_t>(std::string_view) const;
template int64_t Metadata::get<int64_t>(std::string_view) const;
template float Metadata::get<float>(std::string_view) const;
template double Metadata::get<double>(std::string_view) const;
template bool Metadata::get<bool>(std::string_view) const;
template std::string Metadata::get<std::string>(std::string_view) const;

}  // namespace gpunvme::gguf
