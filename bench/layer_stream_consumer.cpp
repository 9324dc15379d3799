// The host reference checksum and the CPU consumer of bench/layer_stream (used when there is no
// GPU: non-CUDA builds, or a CUDA build on a machine without one).
#include <chrono>
#include <cstring>
#include <thread>

#include "bench/baselines/pacing.h"
#include "bench/layer_stream.h"

namespace gpunvme::bench::ls {

uint64_t host_checksum(const uint8_t* buf, std::span<const Range> ranges) {
  uint64_t sum = 0;
  for (const Range& r : ranges) {
    const uint8_t* p = buf + r.dest;
    const uint64_t words = r.bytes / 8;
    for (uint64_t i = 0; i < words; ++i) {
      uint64_t w;
      std::memcpy(&w, p + 8 * i, 8);
      sum += fold_word(w, r.tag + 8 * i);
    }
    if (r.bytes % 8) {
      uint64_t w = 0;
      std::memcpy(&w, p + 8 * words, r.bytes % 8);
      sum += fold_word(w, r.tag + 8 * words);
    }
  }
  return sum;
}

uint64_t pattern_checksum(uint64_t tag, uint64_t bytes) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < bytes / 8; ++i) sum += fold_word(pattern_word(tag + 8 * i), tag + 8 * i);
  return sum;
}

void fill_pattern(uint8_t* dst, uint64_t tag, uint64_t bytes) {
  for (uint64_t i = 0; i < bytes / 8; ++i) {
    const uint64_t w = pattern_word(tag + 8 * i);
    std::memcpy(dst + 8 * i, &w, 8);
  }
}

namespace {

class HostConsumer final : public Consumer {
 public:
  explicit HostConsumer(const Layout& layout) : layout_(layout) {
    for (auto& b : buf_) b.assign(layout.layer_buffer_bytes, 0);
  }
  std::string describe() const override { return "CPU (no GPU: a memcpy stands in for the copy to the GPU)"; }
  bool on_gpu() const override { return false; }

  void begin_pass(uint32_t n, uint64_t compute_ns) override {
    pass_ = {};
    pass_.sums.assign(n, 0);
    compute_ns_ = compute_ns;
  }

  void consume_host(uint32_t l, std::span<const HostPart> parts, bool) override {
    const auto t0 = Clock::now();
    uint8_t* b = buf_[l % 2].data();
    for (const HostPart& p : parts) std::memcpy(b + p.dest, p.src, p.bytes);
    pass_.copy_s += std::chrono::duration<double>(Clock::now() - t0).count();
    compute(l);
  }

  void* device_buffer_for(uint32_t l) override { return buf_[l % 2].data(); }
  void consume_device(uint32_t l) override { compute(l); }
  void* copy_stream() override { return nullptr; }
  ConsumerPass end_pass() override { return pass_; }

 private:
  void compute(uint32_t l) {
    const int64_t t0 = now_ns();
    pass_.sums.at(l) = host_checksum(buf_[l % 2].data(), layout_.ranges[l]);
    wait_until_ns(t0 + int64_t(compute_ns_));
    pass_.compute_s += double(now_ns() - t0) * 1e-9;
  }

  const Layout& layout_;
  std::vector<uint8_t> buf_[2];
  ConsumerPass pass_;
  uint64_t compute_ns_ = 0;
};

}  // namespace

std::unique_ptr<Consumer> make_host_consumer(const Layout& layout) { return std::make_unique<HostConsumer>(layout); }

}  // namespace gpunvme::bench::ls
