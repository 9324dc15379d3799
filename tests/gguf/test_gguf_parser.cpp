// GGUF parser on hand-built files: every value type, arrays, versions, alignments, tensor sizes.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <unistd.h>

#include "runtime/gguf/gguf_file.h"
#include "tests/gguf/gguf_builder.h"

using namespace gpunvme::gguf;
using namespace gguf_test;
using Catch::Matchers::ContainsSubstring;

namespace {

GgufFile parse(const Built& b) { return GgufFile::parse(b.bytes); }

template <class T> std::function<void(Bytes&)> kv_scalar(std::string k, uint32_t type, T v) {
  return kv_raw(k, [=](Bytes& b) { b.put<uint32_t>(type).put<T>(v); });
}

}  // namespace

TEST_CASE("minimal file: no metadata, no tensors", "[gguf]") {
  Spec s;
  auto b = build(s);
  auto f = parse(b);
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.header_size() == 24);
  CHECK(f.data_offset() == 32);
  CHECK(f.metadata().size() == 0);
  CHECK(f.tensors().empty());
  CHECK(f.data_end() == 32);
}

TEST_CASE("every scalar metadata type and typed getters", "[gguf]") {
  Spec s;
  s.kvs = {kv_scalar<uint8_t>("u8", U8, 200),
           kv_scalar<int8_t>("i8", I8, -100),
           kv_scalar<uint16_t>("u16", U16, 60000),
           kv_scalar<int16_t>("i16", I16, -30000),
           kv_scalar<uint32_t>("u32", U32, 4000000000u),
           kv_scalar<int32_t>("i32", I32, -2000000000),
           kv_scalar<uint64_t>("u64", U64, 18000000000000000000ull),
           kv_scalar<int64_t>("i64", I64, -9000000000000000000ll),
           kv_scalar<float>("f32", F32, 1.5f),
           kv_scalar<double>("f64", F64, -2.25),
           kv_scalar<uint8_t>("bool_t", BOOL, 1),
           kv_scalar<uint8_t>("bool_f", BOOL, 0),
           kv_str("str", "h\xc3\xa9llo"),
           kv_str("empty", "")};
  auto f = parse(build(s));
  const auto& m = f.metadata();
  REQUIRE(m.size() == 14);
  CHECK(m.get<uint8_t>("u8") == 200);
  CHECK(m.get<int8_t>("i8") == -100);
  CHECK(m.get<uint16_t>("u16") == 60000);
  CHECK(m.get<int16_t>("i16") == -30000);
  CHECK(m.get<uint32_t>("u32") == 4000000000u);
  CHECK(m.get<int32_t>("i32") == -2000000000);
  CHECK(m.get<uint64_t>("u64") == 18000000000000000000ull);
  CHECK(m.get<int64_t>("i64") == -9000000000000000000ll);
  CHECK(m.get<float>("f32") == 1.5f);
  CHECK(m.get<double>("f64") == -2.25);
  CHECK(m.get<bool>("bool_t"));
  CHECK_FALSE(m.get<bool>("bool_f"));
  CHECK(m.get<std::string>("str") == "h\xc3\xa9llo");
  CHECK(m.get<std::string>("empty").empty());
  // Order is file order.
  CHECK(m.entries()[0].first == "u8");
  CHECK(m.entries()[13].first == "empty");
  // Lenient integer widening.
  CHECK(m.at("u16").as_uint() == 60000);
  CHECK(m.at("i8").as_int() == -100);
  CHECK_THROWS_WITH(m.at("i8").as_uint(), ContainsSubstring("negative"));
  CHECK_THROWS_WITH(m.at("u64").as_int(), ContainsSubstring("does not fit"));
  CHECK_THROWS_WITH(m.at("f32").as_uint(), ContainsSubstring("expected an integer"));
  // Wrong type and missing key are clear errors.
  CHECK_THROWS_WITH(m.get<uint64_t>("u32"), ContainsSubstring("'u32' has type UINT32, expected UINT64"));
  CHECK_THROWS_WITH(m.get<std::string>("u8"), ContainsSubstring("expected STRING"));
  CHECK_THROWS_WITH(m.get<uint32_t>("nope"), ContainsSubstring("'nope' is missing"));
  CHECK_FALSE(m.get_optional<uint32_t>("nope").has_value());
  CHECK(m.get_optional<uint32_t>("u32") == 4000000000u);
}

TEST_CASE("arrays: every element type, strings, nested, empty", "[gguf]") {
  Spec s;
  s.kvs.push_back(kv_raw("a_i16", [](Bytes& b) { b.put<uint32_t>(ARR).put<uint32_t>(I16).put<uint64_t>(3)
                                                   .put<int16_t>(-1).put<int16_t>(2).put<int16_t>(-3); }));
  s.kvs.push_back(kv_raw("a_f64", [](Bytes& b) { b.put<uint32_t>(ARR).put<uint32_t>(F64).put<uint64_t>(2)
                                                   .put<double>(0.5).put<double>(1e300); }));
  s.kvs.push_back(kv_raw("a_bool", [](Bytes& b) { b.put<uint32_t>(ARR).put<uint32_t>(BOOL).put<uint64_t>(2)
                                                    .put<uint8_t>(1).put<uint8_t>(0); }));
  s.kvs.push_back(kv_raw("a_str", [](Bytes& b) { b.put<uint32_t>(ARR).put<uint32_t>(STR).put<uint64_t>(3)
                                                   .str("a").str("").str("\xe2\x96\x81tok"); }));
  s.kvs.push_back(kv_raw("a_empty", [](Bytes& b) { b.put<uint32_t>(ARR).put<uint32_t>(U32).put<uint64_t>(0); }));
  // [[1, 2], ["x"], [[3.5]]]: inner arrays carry their own element types.
  s.kvs.push_back(kv_raw("a_nested", [](Bytes& b) {
    b.put<uint32_t>(ARR).put<uint32_t>(ARR).put<uint64_t>(3);
    b.put<uint32_t>(U64).put<uint64_t>(2).put<uint64_t>(1).put<uint64_t>(2);
    b.put<uint32_t>(STR).put<uint64_t>(1).str("x");
    b.put<uint32_t>(ARR).put<uint64_t>(1).put<uint32_t>(F32).put<uint64_t>(1).put<float>(3.5f);
  }));
  for (uint32_t t : {U8, I8, U16, U32, I32, F32, U64, I64}) {
    s.kvs.push_back(kv_raw("a_t" + std::to_string(t), [t](Bytes& b) {
      b.put<uint32_t>(ARR).put<uint32_t>(t).put<uint64_t>(2);
      size_t sz = (t == U8 || t == I8) ? 1 : (t == U16) ? 2 : (t == U64 || t == I64) ? 8 : 4;
      for (size_t i = 0; i < 2 * sz; ++i) b.put<uint8_t>(static_cast<uint8_t>(i + 1));
    }));
  }
  auto f = parse(build(s));
  const auto& m = f.metadata();
  const Array& i16 = m.at("a_i16").as_array();
  CHECK(i16.elem_type == ValueType::INT16);
  REQUIRE(i16.count == 3);
  CHECK(i16.at(0).as<int16_t>() == -1);
  CHECK(i16.at(2).as<int16_t>() == -3);
  CHECK_THROWS_WITH(i16.at(3), ContainsSubstring("out of range"));
  CHECK(m.at("a_f64").as_array().at(1).as<double>() == 1e300);
  CHECK(m.at("a_bool").as_array().at(0).as<bool>());
  const Array& str = m.at("a_str").as_array();
  REQUIRE(str.strings.size() == 3);
  CHECK(str.strings[2] == "\xe2\x96\x81tok");
  CHECK(str.at(0).as_string() == "a");
  CHECK(m.at("a_empty").as_array().count == 0);
  const Array& n = m.at("a_nested").as_array();
  REQUIRE(n.arrays.size() == 3);
  CHECK(n.arrays[0].elem_type == ValueType::UINT64);
  CHECK(n.arrays[0].at(1).as<uint64_t>() == 2);
  CHECK(n.arrays[1].strings[0] == "x");
  CHECK(n.arrays[2].arrays[0].at(0).as<float>() == 3.5f);
  CHECK(m.at("a_t4").as_array().at(1).as<uint32_t>() == 0x08070605u);
  CHECK(m.at("a_t10").as_array().at(0).as<uint64_t>() == 0x0807060504030201ull);
  CHECK(m.at("a_t1").as_array().at(1).as<int8_t>() == 2);
  CHECK_THROWS_WITH(m.at("a_str").as<uint32_t>(), ContainsSubstring("type ARRAY, expected UINT32"));
}

TEST_CASE("the ggml type table matches gguf-py's GGML_QUANT_SIZES", "[gguf]") {
  // (id, name, block size, type size) from gguf 0.19: python3 -c "import gguf; print(gguf.GGML_QUANT_SIZES)"
  struct Row { uint32_t id; const char* name; uint32_t bs, ts; };
  const Row rows[] = {
      {0, "F32", 1, 4},        {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},      {3, "Q4_1", 32, 20},
      {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 40},
      {10, "Q2_K", 256, 84},   {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
      {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
      {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},  {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},
      {22, "IQ2_S", 256, 82},  {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
      {26, "I32", 1, 4},       {27, "I64", 1, 8},        {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
      {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
      {40, "NVFP4", 64, 36},   {41, "Q1_0", 128, 18},
  };
  REQUIRE(std::size(rows) == ggml_all_types().size());
  for (const auto& r : rows) {
    auto t = ggml_type_info(r.id);
    REQUIRE(t.has_value());
    CHECK(t->name == r.name);
    CHECK(t->block_size == r.bs);
    CHECK(t->type_size == r.ts);
  }
  for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 42u, 1000u}) CHECK_FALSE(ggml_type_info(removed));
  CHECK_THAT(ggml_type_name(4), ContainsSubstring("removed"));
}

TEST_CASE("tensor byte size of every type, 1-D to 4-D", "[gguf]") {
  Spec s;
  for (const auto& t : ggml_all_types()) {
    uint64_t ne0 = 2ull * t.block_size;
    s.tensors.push_back({std::string("t.") + std::string(t.name), {ne0, 3, 2}, static_cast<uint32_t>(t.type),
                         2ull * t.type_size * 3 * 2});
  }
  s.tensors.push_back({"one_d", {5}, 0, 20});
  s.tensors.push_back({"four_d", {2, 3, 4, 5}, 1, 2 * 120});
  s.tensors.push_back({"zero_d", {}, 0, 4});
  auto b = build(s);
  auto f = parse(b);
  REQUIRE(f.tensors().size() == s.tensors.size());
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    const auto& t = f.tensors()[i];
    INFO(t.name);
    CHECK(t.size_bytes == s.tensors[i].nbytes);
    CHECK(t.offset == b.offsets[i]);
    CHECK(t.file_offset == b.data_offset + b.offsets[i]);
    CHECK(t.n_dims == s.tensors[i].ne.size());
  }
  CHECK(f.find_tensor("four_d")->n_elements == 120);
  CHECK(f.find_tensor("four_d")->ne[3] == 5);
  CHECK(f.find_tensor("zero_d")->n_elements == 1);
  CHECK(f.find_tensor("t.Q4_K")->type.type == GgmlType::Q4_K);
  CHECK(f.find_tensor("missing") == nullptr);
  CHECK(f.data_end() == b.data_end);
  CHECK(f.data_end() == f.file_size());
}

TEST_CASE("versions 2 and 3 parse identically", "[gguf]") {
  for (uint32_t v : {2u, 3u}) {
    Spec s;
    s.version = v;
    s.kvs = {kv_str("general.name", "tiny"), kv_str("general.architecture", "llama")};
    s.tensors = {{"token_embd.weight", {64, 2}, 0, 512}};
    auto f = parse(build(s));
    CHECK(f.version() == v);
    CHECK(f.model_name() == "tiny");
    CHECK(f.architecture() == "llama");
    CHECK(f.tensors()[0].size_bytes == 512);
  }
}

TEST_CASE("general.alignment variants move the data section", "[gguf]") {
  for (uint32_t a : {1u, 8u, 32u, 64u, 256u, 4096u, 65536u}) {
    Spec s;
    s.alignment = a;
    s.write_alignment = true;
    s.tensors = {{"a", {3}, 0, 12}, {"b", {7}, 0, 28}, {"c", {1}, 0, 4}};
    auto b = build(s);
    auto f = parse(b);
    INFO("alignment " << a);
    CHECK(f.alignment() == a);
    CHECK(f.data_offset() == align_up(f.header_size(), a));
    CHECK(f.data_offset() == b.data_offset);
    CHECK(f.data_offset() % a == 0);
    for (size_t i = 0; i < 3; ++i) CHECK(f.tensors()[i].file_offset == b.data_offset + b.offsets[i]);
  }
}

TEST_CASE("tensors stored out of info order, with gaps", "[gguf]") {
  Spec s;
  s.tensors = {{"late", {8}, 0, 32, 128}, {"early", {8}, 0, 32, 0}, {"mid", {4}, 0, 16, 64}};
  auto f = parse(build(s));
  CHECK(f.find_tensor("late")->offset == 128);
  CHECK(f.data_end() == f.data_offset() + 160);
}

TEST_CASE("file, memory and callback sources agree", "[gguf]") {
  Spec s;
  s.kvs = {kv_str("general.name", "x")};
  s.tensors = {{"blk.0.w", {32, 4}, 8, 4 * 34}, {"blk.1.w", {256}, 12, 144}};
  auto b = build(s);
  char path[] = "/tmp/gguf_test_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, b.bytes.data(), b.bytes.size()) == static_cast<ssize_t>(b.bytes.size()));
  close(fd);
  auto from_file = GgufFile::open(path);
  unlink(path);
  size_t calls = 0;
  CallbackSource cb([&](uint64_t off, void* dst, size_t len) {
    ++calls;
    size_t n = off >= b.bytes.size() ? 0 : std::min<size_t>(len, b.bytes.size() - off);
    std::memcpy(dst, b.bytes.data() + off, n);
    return n;
  }, b.bytes.size(), "callback");
  auto from_cb = GgufFile::read(cb);
  auto from_mem = parse(b);
  CHECK(calls >= 1);
  for (const auto* f : {&from_file, &from_cb}) {
    CHECK(f->data_offset() == from_mem.data_offset());
    REQUIRE(f->tensors().size() == 2);
    CHECK(f->tensors()[1].file_offset == from_mem.tensors()[1].file_offset);
    CHECK(f->model_name() == "x");
  }
  CHECK_THROWS_WITH(GgufFile::open("/nonexistent/model.gguf"),
                    ContainsSubstring("cannot open GGUF file '/nonexistent/model.gguf'"));
  CHECK_THROWS_WITH(GgufFile::open("/tmp"), ContainsSubstring("is a directory"));
}
