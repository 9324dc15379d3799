// Replays the fuzz seed corpus and every saved fuzzer finding (tests/data/gguf/crashes) through
// the fuzz target itself, so past crashes/OOMs stay fixed without clang or libFuzzer.
#include <catch2/catch_test_macros.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fs = std::filesystem;

TEST_CASE("fuzz corpus and saved findings replay cleanly", "[gguf][fuzz]") {
  const char* data = std::getenv("GPUNVME_TEST_DATA");
  if (data == nullptr) SKIP("GPUNVME_TEST_DATA is not set (run through meson test)");
  size_t n = 0;
  for (const char* sub : {"gguf/corpus", "gguf/crashes"}) {
    fs::path dir = fs::path(data) / sub;
    if (!fs::is_directory(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      std::ifstream in(e.path(), std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      INFO(e.path().string());
      CHECK(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()) == 0);
      ++n;
    }
  }
  CHECK(n >= 5);
}
