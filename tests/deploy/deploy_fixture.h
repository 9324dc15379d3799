// Shared helpers for the deploy tests: generated GGUF models with layers and experts (non-periodic
// data bytes, so a misplaced block is caught), temporary files and image files.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "host/io_patterns.h"
#include "tests/gguf/gguf_builder.h"
#include "tests/test_files.h"

namespace deploy_test {

// A unique path under /tmp, removed (with any emulator side files) when the object dies.
struct TempPath {
  std::string path;
  explicit TempPath(const char* stem = "gpunvme-deploy") {
    std::string t = std::string("/tmp/") + stem + "-XXXXXX";
    const int fd = mkstemp(t.data());
    if (fd >= 0) ::close(fd);
    ::unlink(t.c_str());
    path = t;
  }
  ~TempPath() { ::unlink(path.c_str()); }
  TempPath(const TempPath&) = delete;
};

// A small MoE-style model: token_embd sized to reach about `bytes`, 3 layers with attention and
// stacked experts (4 experts), output tensors. F32 (type 0) throughout; alignment 32.
inline std::vector<uint8_t> make_model(uint64_t bytes, const std::string& name = "deploy test model", uint64_t seed = 1) {
  using namespace gguf_test;
  Spec s;
  s.kvs = {kv_str("general.architecture", "llama"), kv_str("general.name", name), kv_u32("llama.expert_count", 4),
           kv_u32("llama.block_count", 3)};
  const uint64_t rows = std::max<uint64_t>(1, bytes / (4 * 1024));
  s.tensors.push_back({"token_embd.weight", {1024, rows}, 0, 4 * 1024 * rows});
  for (int l = 0; l < 3; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    s.tensors.push_back({b + "attn_norm.weight", {96}, 0, 4 * 96});
    s.tensors.push_back({b + "attn_q.weight", {96, 37}, 0, 4 * 96 * 37});
    s.tensors.push_back({b + "ffn_gate_exps.weight", {64, 9, 4}, 0, 4 * 64 * 9 * 4});
    s.tensors.push_back({b + "ffn_up_exps.weight", {64, 9, 4}, 0, 4 * 64 * 9 * 4});
    s.tensors.push_back({b + "ffn_down_exps.weight", {9, 64, 4}, 0, 4 * 9 * 64 * 4});
  }
  s.tensors.push_back({"output_norm.weight", {96}, 0, 4 * 96});
  s.tensors.push_back({"output.weight", {96, 13}, 0, 4 * 96 * 13});
  auto built = build(s);
  gpunvme::host::fill_pattern(built.bytes.data() + built.data_offset, built.bytes.size() - built.data_offset, seed);
  return built.bytes;
}

using test_files::read_file;
using test_files::read_text;
using test_files::write_file;

inline void pwrite_file(const std::string& path, uint64_t offset, const void* data, size_t len) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0) std::abort();
  if (::pwrite(fd, data, len, off_t(offset)) != ssize_t(len)) std::abort();
  ::close(fd);
}

using test_files::gemma_path;

}  // namespace deploy_test
