#include "examples/llm/engine/finite_weights.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "examples/llm/quant/dequant.h"

namespace gpunvme::llm {
namespace {

// The first non-finite element of `rows` whole rows of `cols` elements, or -1.
int64_t first_non_finite(GgmlType t, const uint8_t* p, uint64_t row_bytes, uint64_t rows, uint64_t cols, float* value) {
  float y[kGroup];
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t g = 0; g < cols / kGroup; ++g) {
      dequant_group(t, p + r * row_bytes, g, y);
      for (int i = 0; i < kGroup; ++i)
        if (!std::isfinite(y[i])) {
          *value = y[i];
          return int64_t(r * cols + g * kGroup + uint64_t(i));
        }
    }
  return -1;
}

}  // namespace

std::optional<NonFiniteWeight> find_non_finite_weight(const ModelOnDevice& m, uint64_t max_bytes, bool* scanned_all) {
  constexpr uint64_t kPiece = 16 << 20;  // read in pieces of whole rows
  std::vector<uint8_t> buf;
  uint64_t scanned = 0;
  *scanned_all = true;
  for (const gguf::TensorInfo& t : m.file->tensors()) {
    const GgmlType type = t.type.type;
    const uint64_t cols = t.ne[0];
    if (!computes(type) || cols % kGroup != 0 || t.n_elements == 0) continue;
    if (scanned + t.size_bytes > max_bytes) {
      *scanned_all = false;
      return std::nullopt;
    }
    const uint64_t n_rows = t.n_elements / cols, row_bytes = t.size_bytes / n_rows;
    const uint64_t per = std::max<uint64_t>(1, kPiece / row_bytes);
    for (uint64_t r = 0; r < n_rows; r += per) {
      const uint64_t rows = std::min(per, n_rows - r);
      buf.resize(rows * row_bytes);
      read_model_bytes(m, t.file_offset + r * row_bytes, buf.size(), buf.data());
      float value = 0;
      const int64_t at = first_non_finite(type, buf.data(), row_bytes, rows, cols, &value);
      if (at >= 0) return NonFiniteWeight{t.name, r * cols + uint64_t(at), value};
    }
    scanned += t.size_bytes;
  }
  return std::nullopt;
}

}  // namespace gpunvme::llm
