#include "examples/llm/tools/generated_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <thread>

#include "examples/llm/quant/blocks.h"
#include "runtime/gguf/ggml_types.h"

namespace gpunvme::llm::gen {
namespace {

// splitmix64: fast, and one 64-bit seed names a whole block.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double unit() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  void bytes(uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
      const uint64_t v = next();
      std::memcpy(p + i, &v, std::min<size_t>(8, n - i));
    }
  }
};

uint64_t mix(uint64_t a, uint64_t b) { return Rng{a ^ (b * 0xD6E8FEB86659FD93ull)}.next(); }

// A finite positive float (1e-7 .. 65504) as an IEEE half, rounded to nearest (subnormals too).
uint16_t to_half(float x) {
  if (!(x > 0 && x < 65504.0f)) throw std::logic_error("scale out of the half range");
  int e = 0;
  const float m = std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1)
  if (e - 1 < -14) return uint16_t(std::lround(x * 0x1.0p24));  // subnormal: units of 2^-24
  uint32_t mant = uint32_t(std::lround((m * 2 - 1) * 1024));
  int exp = e - 1 + 15;
  if (mant == 1024) mant = 0, ++exp;
  return uint16_t((exp << 10) | mant);
}

// The size of the values a tensor should have.
double sigma(Fill f, uint64_t cols) { return f == Fill::kWeight ? 1.0 / std::sqrt(double(cols)) : 1.0; }

}  // namespace

void make_block(uint32_t type, Fill fill, uint64_t cols, uint64_t rng_seed, uint8_t* out) {
  Rng r{rng_seed};
  const double s = sigma(fill, cols);
  switch (gguf::GgmlType(type)) {
    case gguf::GgmlType::Q4_K: {
      // w = d * sc * q - dmin * m, q in 0..15; sc and m in 0..15 (the high bits of the 6-bit fields
      // zero), so E[d sc q] = 56 d = E[dmin m] with dmin = 7.5 d: centred, a spread of about 64 d.
      BlockQ4_K b;
      r.bytes(b.qs, sizeof b.qs);
      r.bytes(b.scales, sizeof b.scales);
      for (int j = 0; j < 8; ++j) b.scales[j] &= 0x0F;
      const double d = s / 64 * (0.75 + 0.5 * r.unit());
      b.d = to_half(float(d));
      b.dmin = to_half(float(d * 7.5));
      std::memcpy(out, &b, sizeof b);
      return;
    }
    case gguf::GgmlType::Q6_K: {
      // w = d * scale * (q - 32), q in 0..63, scale in -8..8: centred, a spread of about 90 d.
      BlockQ6_K b;
      r.bytes(b.ql, sizeof b.ql);
      r.bytes(b.qh, sizeof b.qh);
      for (int8_t& sc : b.scales) sc = int8_t(int(r.next() % 17) - 8);
      b.d = to_half(float(s / 90 * (0.75 + 0.5 * r.unit())));
      std::memcpy(out, &b, sizeof b);
      return;
    }
    case gguf::GgmlType::F32: {
      const double u = r.unit() - 0.5;
      const float v = float(fill == Fill::kNorm ? 1 + 0.2 * u : fill == Fill::kRouter ? 3.4 * u : 3.46 * s * u);
      std::memcpy(out, &v, 4);
      return;
    }
    default:
      throw std::invalid_argument("the generator writes Q4_K, Q6_K and F32 tensors, not " + gguf::ggml_type_name(type));
  }
}

GeneratedModel::GeneratedModel(const ModelLayout& layout, uint64_t seed, uint32_t threads) : seed_(seed) {
  const gguf::builder::Built built = gguf::builder::build(layout.spec);
  header_ = built.bytes;
  size_ = built.data_end;
  threads_ = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const auto info = gguf::ggml_type_info(layout.tensors[i].type);
    if (!info) throw std::invalid_argument("unknown ggml type in the layout");
    tensors_.push_back({layout.tensors[i], built.data_offset + built.offsets[i], info->type_size, info->block_size});
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const Placed& a, const Placed& b) { return a.begin < b.begin; });
}

size_t GeneratedModel::read(uint64_t offset, void* dst, size_t len) {
  if (offset >= size_) return 0;
  len = size_t(std::min<uint64_t>(len, size_ - offset));
  auto* out = static_cast<uint8_t*>(dst);
  const uint32_t n = len >= (1u << 20) ? threads_ : 1;
  if (n == 1) {
    read_serial(offset, out, len);
    return len;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(n);
  const size_t part = (len + n - 1) / n;
  for (uint32_t t = 0; t < n; ++t) {
    const size_t lo = size_t(t) * part, hi = std::min(len, lo + part);
    if (lo >= hi) break;
    pool.emplace_back([&, t, lo, hi] {
      try {
        read_serial(offset + lo, out + lo, hi - lo);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return len;
}

void GeneratedModel::read_serial(uint64_t offset, uint8_t* dst, size_t len) const {
  const uint64_t end = offset + len;
  std::memset(dst, 0, len);  // alignment padding between tensors
  if (offset < header_.size()) std::memcpy(dst, header_.data() + offset, size_t(std::min<uint64_t>(end, header_.size()) - offset));
  // The first tensor that ends after `offset`.
  auto it = std::upper_bound(tensors_.begin(), tensors_.end(), offset,
                             [](uint64_t off, const Placed& t) { return off < t.begin + t.plan.bytes; });
  for (; it != tensors_.end() && it->begin < end; ++it) {
    const uint64_t lo = std::max(offset, it->begin), hi = std::min(end, it->begin + it->plan.bytes);
    if (lo < hi) fill_blocks(*it, uint32_t(it - tensors_.begin()), lo, hi, dst + (lo - offset));
  }
}

// Bytes [lo, hi) of tensor t (absolute offsets) into dst.
void GeneratedModel::fill_blocks(const Placed& t, uint32_t index, uint64_t lo, uint64_t hi, uint8_t* dst) const {
  const uint64_t bb = t.block_bytes, cols = t.plan.ne[0];
  uint8_t tmp[256];
  const uint64_t tensor_seed = mix(seed_, index);
  for (uint64_t k = (lo - t.begin) / bb;; ++k) {
    const uint64_t b0 = t.begin + k * bb;
    if (b0 >= hi) break;
    const uint64_t seed = mix(tensor_seed, k);
    if (b0 >= lo && b0 + bb <= hi) {
      make_block(t.plan.type, t.plan.fill, cols, seed, dst + (b0 - lo));
    } else {
      make_block(t.plan.type, t.plan.fill, cols, seed, tmp);
      const uint64_t a = std::max(lo, b0), z = std::min(hi, b0 + bb);
      std::memcpy(dst + (a - lo), tmp + (a - b0), z - a);
    }
  }
}

}  // namespace gpunvme::llm::gen
