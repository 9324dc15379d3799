// Every error class of the GGUF parser: each must be a GgufError with a useful message, never a
// crash, an out-of-bounds read (run under ASan/the fuzzer too) or a huge allocation.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <random>

#include "runtime/gguf/gguf_file.h"
#include "tests/gguf/gguf_builder.h"

using namespace gpunvme::gguf;
using namespace gguf_test;
using Catch::Matchers::ContainsSubstring;

namespace {

// A small file that exercises every parser path: all value types, arrays, nested arrays, tensors.
Built rich_file() {
  Spec s;
  s.write_alignment = true;
  s.alignment = 64;
  s.kvs = {kv_str("general.name", "rich"),
           kv_raw("u8", [](Bytes& b) { b.put<uint32_t>(U8).put<uint8_t>(1); }),
           kv_raw("i64", [](Bytes& b) { b.put<uint32_t>(I64).put<int64_t>(-1); }),
           kv_raw("f64", [](Bytes& b) { b.put<uint32_t>(F64).put<double>(0.25); }),
           kv_raw("b", [](Bytes& b) { b.put<uint32_t>(BOOL).put<uint8_t>(1); }),
           kv_raw("as", [](Bytes& b) { b.put<uint32_t>(ARR).put<uint32_t>(STR).put<uint64_t>(2).str("ab").str("c"); }),
           kv_raw("an", [](Bytes& b) {
             b.put<uint32_t>(ARR).put<uint32_t>(ARR).put<uint64_t>(2);
             b.put<uint32_t>(I32).put<uint64_t>(1).put<int32_t>(7);
             b.put<uint32_t>(STR).put<uint64_t>(1).str("z");
           })};
  s.tensors = {{"blk.0.attn_q.weight", {32, 2}, 2, 36}, {"output_norm.weight", {4}, 0, 16}};
  return build(s);
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    (void)GgufFile::parse(bytes);
  } catch (const GgufError& e) {
    return e.what();
  }
  return "";
}

template <class T> void poke(std::vector<uint8_t>& b, size_t at, T v) { std::memcpy(b.data() + at, &v, sizeof v); }

}  // namespace

TEST_CASE("every truncation of a valid file is a clean GgufError", "[gguf][errors]") {
  auto b = rich_file();
  REQUIRE_NOTHROW(GgufFile::parse(b.bytes));
  for (size_t len = 0; len < b.bytes.size(); ++len) {
    std::vector<uint8_t> cut(b.bytes.begin(), b.bytes.begin() + static_cast<std::ptrdiff_t>(len));
    INFO("prefix length " << len);
    std::string msg = error_of(cut);
    REQUIRE_FALSE(msg.empty());
    if (len >= 4) {
      REQUIRE((msg.find("truncated") != std::string::npos || msg.find("cannot fit") != std::string::npos ||
               msg.find("larger than") != std::string::npos));
    }
  }
  CHECK_THAT(error_of({}), ContainsSubstring("too short to be a GGUF file"));
  std::vector<uint8_t> cut(b.bytes.begin(), b.bytes.end() - 1);
  CHECK_THAT(error_of(cut), ContainsSubstring("tensor 'output_norm.weight' data spans bytes"));
  CHECK_THAT(error_of(cut), ContainsSubstring("was the download or the dd copy complete?"));
}

TEST_CASE("random byte corruption never crashes", "[gguf][errors]") {
  auto b = rich_file();
  std::mt19937 rng(42);
  int errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto m = b.bytes;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) m[rng() % b.header_size] = static_cast<uint8_t>(rng());
    try {
      (void)GgufFile::parse(m);
    } catch (const GgufError&) {
      ++errors;
    }
  }
  CHECK(errors > 0);
}

TEST_CASE("big-endian files are refused as such", "[gguf][errors]") {
  auto b = rich_file().bytes;
  auto be = b;
  poke<uint32_t>(be, 4, __builtin_bswap32(3u));
  CHECK_THAT(error_of(be), ContainsSubstring("big-endian"));
  poke<uint32_t>(be, 4, __builtin_bswap32(2u));
  CHECK_THAT(error_of(be), ContainsSubstring("big-endian"));
  auto swapped_magic = b;
  std::memcpy(swapped_magic.data(), "FUGG", 4);
  CHECK_THAT(error_of(swapped_magic), ContainsSubstring("byte-swapped"));
}

TEST_CASE("bad magic and unsupported versions", "[gguf][errors]") {
  auto b = rich_file().bytes;
  auto bad = b;
  std::memcpy(bad.data(), "PK\x03\x04", 4);
  CHECK_THAT(error_of(bad), ContainsSubstring("is not a GGUF file: bytes 0..3 are [50 4b 03 04]"));
  auto v1 = b;
  poke<uint32_t>(v1, 4, 1);
  CHECK_THAT(error_of(v1), ContainsSubstring("version 1"));
  auto v4 = b;
  poke<uint32_t>(v4, 4, 4);
  CHECK_THAT(error_of(v4), ContainsSubstring("GGUF version 4, this reader supports versions 2 and 3"));
}

TEST_CASE("bad general.alignment", "[gguf][errors]") {
  for (uint32_t a : {0u, 3u, 48u, 100u}) {
    Spec s;
    s.kvs = {kv_u32("general.alignment", a)};
    INFO(a);
    CHECK_THAT(error_of(build(s).bytes), ContainsSubstring("non-zero power of two"));
  }
  Spec s;
  s.kvs = {kv_raw("general.alignment", [](Bytes& b) { b.put<uint32_t>(U64).put<uint64_t>(32); })};
  CHECK_THAT(error_of(build(s).bytes), ContainsSubstring("has type UINT64, GGUF requires UINT32"));
}

TEST_CASE("tensor info errors name the tensor", "[gguf][errors]") {
  auto one = [](Tensor t) {
    Spec s;
    s.tensors = {std::move(t)};
    return error_of(build(s).bytes);
  };
  CHECK_THAT(one({"blk.3.attn_q.weight", {32}, 4, 18}),
             ContainsSubstring("tensor 'blk.3.attn_q.weight' (info at byte offset 24) has unknown ggml type 4"));
  CHECK_THAT(one({"w", {32}, 31, 18}), ContainsSubstring("Q4_0_4_4"));
  CHECK_THAT(one({"w", {32}, 99, 18}), ContainsSubstring("unknown ggml type 99"));
  CHECK_THAT(one({"w", {100}, 12, 144}),
             ContainsSubstring("type Q4_K and ne[0] = 100, which is not a multiple of the type's block size 256"));
  CHECK_THAT(one({"blk.0.ffn_down_exps.weight", {2880 + 16, 4}, 39, 17}),  // MXFP4 (gpt-oss experts): 32 per block
             ContainsSubstring("'blk.0.ffn_down_exps.weight'") && ContainsSubstring("type MXFP4 and ne[0] = 2896, which is not a multiple of the type's block size 32"));
  CHECK_THAT(one({"w", {1, 1, 1, 1, 1}, 0, 4}), ContainsSubstring("n_dims = 5, GGUF allows at most 4"));
  CHECK_THAT(one({"w", {1ull << 63}, 0, 4}), ContainsSubstring("larger than INT64_MAX"));
  CHECK_THAT(one({"w", {1ull << 40, 1ull << 40}, 0, 4}), ContainsSubstring("overflows int64"));
  CHECK_THAT(one({"w", {4}, 0, 16, 8}), ContainsSubstring("not a multiple of the file's alignment 32"));
  CHECK_THAT(one({"w", {1ull << 40}, 0, 16}), ContainsSubstring("data spans bytes"));
  Spec far;  // header only: the builder must not try to write data at 2^62
  far.data = false;
  far.tensors = {{"w", {4}, 0, 16, 1ull << 62}};
  CHECK_THAT(error_of(build(far).bytes), ContainsSubstring("tensor 'w' data spans bytes"));
}

TEST_CASE("overlapping and duplicate tensors", "[gguf][errors]") {
  Spec s;
  s.tensors = {{"a", {16}, 0, 64, 0}, {"b", {16}, 0, 64, 32}};
  CHECK_THAT(error_of(build(s).bytes), ContainsSubstring("tensors 'a'"));
  CHECK_THAT(error_of(build(s).bytes), ContainsSubstring("overlap in the data section"));
  // A tensor fully inside a bigger earlier one is caught too.
  s.tensors = {{"big", {64}, 0, 256, 0}, {"x", {4}, 0, 16, 64}, {"y", {4}, 0, 16, 128}};
  CHECK_THAT(error_of(build(s).bytes), ContainsSubstring("'big'"));
  s.tensors = {{"same", {4}, 0, 16}, {"same", {4}, 0, 16}};
  CHECK_THAT(error_of(build(s).bytes), ContainsSubstring("duplicate tensor name 'same'"));
  Spec k;
  k.kvs = {kv_str("general.name", "a"), kv_str("general.name", "b")};
  CHECK_THAT(error_of(build(k).bytes), ContainsSubstring("duplicate metadata key 'general.name'"));
}

TEST_CASE("names from the file are escaped in error messages: no terminal escape, no forged line", "[gguf][errors]") {
  const std::string evil = "w\x1b[2J\nOK: forged";
  Spec s;
  s.tensors = {{evil, {16}, 0, 64, 0}, {evil, {16}, 0, 64, 64}};
  const std::string dup = error_of(build(s).bytes);
  CHECK_THAT(dup, ContainsSubstring("duplicate tensor name 'w\\e[2J\\nOK: forged'"));
  s.tensors = {{evil, {16}, 0, 64, 0}, {"b", {16}, 0, 64, 32}};
  const std::string overlap = error_of(build(s).bytes);
  CHECK_THAT(overlap, ContainsSubstring("tensors 'w\\e[2J\\nOK: forged'"));
  Spec k;
  k.kvs = {kv_str(evil, "a"), kv_str(evil, "b")};
  const std::string key = error_of(build(k).bytes);
  CHECK_THAT(key, ContainsSubstring("duplicate metadata key 'w\\e[2J\\nOK: forged'"));
  for (const std::string& m : {dup, overlap, key}) {
    CHECK(m.find('\x1b') == std::string::npos);
    CHECK(m.find('\n') == std::string::npos);
  }
}

TEST_CASE("hostile counts and lengths are rejected before allocating", "[gguf][errors]") {
  Spec s;
  s.n_kv_override = 1ull << 60;
  CHECK_THAT(error_of(build(s).bytes), ContainsSubstring("metadata count 1152921504606846976 at byte offset 16"));
  Spec t;
  t.n_tensors_override = 1ull << 60;
  CHECK_THAT(error_of(build(t).bytes), ContainsSubstring("tensor count"));
  Spec str;
  str.kvs = {kv_raw("k", [](Bytes& b) { b.put<uint32_t>(STR).put<uint64_t>(1ull << 63); })};
  CHECK_THAT(error_of(build(str).bytes), ContainsSubstring("string length 9223372036854775808"));
  CHECK_THAT(error_of(build(str).bytes), ContainsSubstring("metadata entry 0 'k'"));
  Spec key;
  key.kvs = {[](Bytes& b) { b.put<uint64_t>(~0ull).put<uint64_t>(0).put<uint64_t>(0); }};
  CHECK_THAT(error_of(build(key).bytes), ContainsSubstring("string length"));
  for (uint32_t et : {U8, U64, STR, ARR}) {
    Spec arr;
    arr.kvs = {kv_raw("k", [et](Bytes& b) { b.put<uint32_t>(ARR).put<uint32_t>(et).put<uint64_t>(1ull << 62); })};
    INFO(et);
    CHECK_THAT(error_of(build(arr).bytes), ContainsSubstring("cannot fit in the"));
  }
}

TEST_CASE("unknown value types and runaway nesting", "[gguf][errors]") {
  Spec s;
  s.kvs = {kv_raw("k", [](Bytes& b) { b.put<uint32_t>(13).put<uint32_t>(0); })};
  CHECK_THAT(error_of(build(s).bytes), ContainsSubstring("unknown metadata value type 13 at byte offset"));
  Spec a;
  a.kvs = {kv_raw("k", [](Bytes& b) { b.put<uint32_t>(ARR).put<uint32_t>(77).put<uint64_t>(0); })};
  CHECK_THAT(error_of(build(a).bytes), ContainsSubstring("unknown metadata value type 77"));
  Spec deep;
  deep.kvs = {kv_raw("k", [](Bytes& b) {
    b.put<uint32_t>(ARR);
    for (int i = 0; i < 40; ++i) b.put<uint32_t>(ARR).put<uint64_t>(1);
    b.put<uint32_t>(U8).put<uint64_t>(0);
  })};
  CHECK_THAT(error_of(build(deep).bytes), ContainsSubstring("nested deeper than 16"));
}

TEST_CASE("a source that reads short is reported", "[gguf][errors]") {
  auto b = rich_file();
  CallbackSource lying([&](uint64_t off, void* dst, size_t len) -> size_t {
    if (off >= 40) return 0;  // claims a size it cannot deliver
    size_t n = std::min<size_t>(len, 40 - off);
    std::memcpy(dst, b.bytes.data() + off, n);
    return n;
  }, b.bytes.size(), "flaky device");
  CHECK_THROWS_WITH(GgufFile::read(lying), ContainsSubstring("short read from flaky device"));
}
