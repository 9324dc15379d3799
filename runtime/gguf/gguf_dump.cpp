// gguf_dump: print a GGUF header (metadata + tensor table) read with our parser.
//   gguf_dump FILE            human-readable summary
//   gguf_dump --json FILE     full JSON (every metadata value, every tensor), used by the
//                             gguf-py cross-check in scripts/gguf_crosscheck.py
// Strings go through text::json_string: valid JSON for any bytes, with bytes that are not UTF-8 as
// \udcNN, which the checker's json.loads turns into exactly what its surrogateescape decoding of
// gguf-py's bytes gives, so non-UTF-8 token bytes still compare exactly.
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "host/text/escape.h"
#include "runtime/gguf/gguf_file.h"

using namespace gpunvme::gguf;

namespace {

void put_json_string(const std::string& s) { std::fputs(gpunvme::text::json_string(s).c_str(), stdout); }

void put_double(double d, int digits) {
  if (std::isnan(d)) std::fputs("NaN", stdout);
  else if (std::isinf(d)) std::fputs(d > 0 ? "Infinity" : "-Infinity", stdout);
  else std::printf("%.*g", digits, d);
}

void put_scalar(const Value& v) {
  switch (v.type()) {
    case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32: case ValueType::UINT64:
      std::printf("%" PRIu64, v.as_uint());
      break;
    case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
      std::printf("%" PRId64, v.as_int());
      break;
    case ValueType::FLOAT32: put_double(v.as<float>(), 17); break;  // exact as a double
    case ValueType::FLOAT64: put_double(v.as<double>(), 17); break;
    case ValueType::BOOL: std::fputs(v.raw_bits() ? "true" : "false", stdout); break;
    case ValueType::STRING: put_json_string(v.as_string()); break;
    case ValueType::ARRAY: break;
  }
}

void put_array(const Array& a) {
  std::printf("{\"type\":\"%s\",\"values\":[", value_type_name(static_cast<uint32_t>(a.elem_type)).c_str());
  for (uint64_t i = 0; i < a.count; ++i) {
    if (i) std::fputc(',', stdout);
    if (a.elem_type == ValueType::ARRAY) put_array(a.arrays[i]);
    else if (a.elem_type == ValueType::STRING) put_json_string(a.strings[i]);
    else put_scalar(a.at(i));
  }
  std::fputs("]}", stdout);
}

void dump_json(const GgufFile& f) {
  std::printf("{\"version\":%u,\"alignment\":%u,\"header_size\":%" PRIu64 ",\"data_offset\":%" PRIu64
              ",\"file_size\":%" PRIu64 ",\"metadata\":[",
              f.version(), f.alignment(), f.header_size(), f.data_offset(), f.file_size());
  bool first = true;
  for (const auto& [key, v] : f.metadata().entries()) {
    std::fputs(first ? "\n" : ",\n", stdout);
    first = false;
    std::fputs("{\"key\":", stdout);
    put_json_string(key);
    std::printf(",\"type\":\"%s\",\"value\":", value_type_name(static_cast<uint32_t>(v.type())).c_str());
    if (v.type() == ValueType::ARRAY) put_array(v.as_array());
    else put_scalar(v);
    std::fputc('}', stdout);
  }
  std::fputs("],\"tensors\":[", stdout);
  first = true;
  for (const auto& t : f.tensors()) {
    std::fputs(first ? "\n" : ",\n", stdout);
    first = false;
    std::fputs("{\"name\":", stdout);
    put_json_string(t.name);
    std::printf(",\"type\":\"%.*s\",\"type_id\":%u,\"shape\":[", static_cast<int>(t.type.name.size()),
                t.type.name.data(), t.type_id);
    for (uint32_t d = 0; d < t.n_dims; ++d) std::printf("%s%" PRIu64, d ? "," : "", t.ne[d]);
    std::printf("],\"offset\":%" PRIu64 ",\"file_offset\":%" PRIu64 ",\"n_bytes\":%" PRIu64
                ",\"n_elements\":%" PRIu64 "}",
                t.offset, t.file_offset, t.size_bytes, t.n_elements);
  }
  std::fputs("]}\n", stdout);
}

void dump_text(const GgufFile& f, double ms) {
  std::printf("GGUF v%u, alignment %u, %zu metadata keys, %zu tensors\n", f.version(), f.alignment(),
              f.metadata().size(), f.tensors().size());
  std::printf("header %" PRIu64 " bytes, data section at %" PRIu64 ", data ends at %" PRIu64 ", file %" PRIu64
              " bytes\n", f.header_size(), f.data_offset(), f.data_end(), f.file_size());
  std::printf("parsed in %.3f ms, %" PRIu64 " bytes read\n", ms, f.bytes_read());
  if (!f.model_name().empty()) std::printf("name: %s\n", gpunvme::text::printable(f.model_name()).c_str());
  if (!f.architecture().empty()) std::printf("architecture: %s\n", gpunvme::text::printable(f.architecture()).c_str());
  for (const auto& t : f.tensors()) {
    std::printf("  %-40s %-8.*s [", gpunvme::text::printable(t.name).c_str(), static_cast<int>(t.type.name.size()), t.type.name.data());
    for (uint32_t d = 0; d < t.n_dims; ++d) std::printf("%s%" PRIu64, d ? ", " : "", t.ne[d]);
    std::printf("] @%" PRIu64 " %" PRIu64 " bytes\n", t.file_offset, t.size_bytes);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  const char* path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) json = true;
    else path = argv[i];
  }
  if (path == nullptr) {
    std::fprintf(stderr, "usage: %s [--json] FILE.gguf\n", argv[0]);
    return 2;
  }
  try {
    auto t0 = std::chrono::steady_clock::now();
    GgufFile f = GgufFile::open(path);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (json) dump_json(f);
    else dump_text(f, ms);
  } catch (const GgufError& e) {
    std::fprintf(stderr, "gguf_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
