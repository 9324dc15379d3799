// One thread's memcpy rate, 1 MiB at a time over 4 GiB (what the mmap loader's worker does per chunk).
// It bounds bench/llm_tokens' mmap loaders (one worker): where it beats the modeled drive, that loader can
// keep up with the drive. Build and run: g++ -O2 -o /tmp/memcpy_rate scripts/probes/memcpy_rate.cpp && /tmp/memcpy_rate
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
int main() {
  const size_t n = size_t(4) << 30, c = 1 << 20;
  std::vector<char> a(n, 1), b(n, 2);
  for (int r = 0; r < 3; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (size_t o = 0; o < n; o += c) std::memcpy(b.data() + o, a.data() + o, c);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("memcpy one thread: %.2f GB/s\n", n / s / 1e9);
  }
  return b[12345] == 1 ? 0 : 1;
}
