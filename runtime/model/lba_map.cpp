#include "runtime/model/lba_map.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "runtime/model/block_io.h"
#include "runtime/model/model_error.h"

namespace gpunvme::model {

Extent byte_range_to_extent(uint64_t file_offset, uint64_t length, uint32_t lba_size, uint64_t start_lba) {
  Extent e;
  e.first_lba = start_lba + file_offset / lba_size;
  e.byte_in_first = static_cast<uint32_t>(file_offset % lba_size);
  e.byte_length = length;
  // Blocks touched: from the block holding the first byte to the one holding the last.
  e.lba_count = length == 0 ? 0 : (e.byte_in_first + length + lba_size - 1) / lba_size;
  return e;
}

LbaMap::LbaMap(const gguf::GgufFile& file, uint32_t lba_size, uint64_t start_lba)
    : lba_size_(lba_size), start_lba_(start_lba) {
  check_lba_size(lba_size);
  model_ = byte_range_to_extent(0, file.data_end(), lba_size, start_lba);
  const auto& ts = file.tensors();
  tensors_.reserve(ts.size());
  std::map<uint32_t, size_t> layer_slot;
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto& t = ts[i];
    tensors_.push_back({&t, byte_range_to_extent(t.file_offset, t.size_bytes, lba_size, start_lba)});
    auto layer = layer_of(t.name);
    if (!layer) {
      globals_.push_back(i);
      continue;
    }
    auto [it, fresh] = layer_slot.emplace(*layer, 0);
    if (fresh) {
      it->second = layers_.size();
      layers_.push_back({*layer, {}, {}});
    }
    layers_[it->second].tensors.push_back(i);
  }
  std::sort(layers_.begin(), layers_.end(), [](const auto& a, const auto& b) { return a.layer < b.layer; });
  for (auto& l : layers_) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i : l.tensors) {
      lo = std::min(lo, ts[i].file_offset);
      hi = std::max(hi, ts[i].file_end());
    }
    l.extent = byte_range_to_extent(lo, hi - lo, lba_size, start_lba);
  }
  add_experts(file);
}

void LbaMap::add_experts(const gguf::GgufFile& file) {
  const auto& ts = file.tensors();
  // <arch>.expert_count, when present, must match the stacked tensors' outer dimension.
  std::optional<uint64_t> declared;
  if (const auto* v = file.metadata().find(file.architecture() + ".expert_count")) {
    try {
      declared = v->as_uint();
    } catch (const gguf::GgufError& e) {
      throw ModelError(file.architecture() + ".expert_count: " + e.what());
    }
  }
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto& t = ts[i];
    auto en = parse_expert_name(t.name);
    if (!en) continue;
    if (!en->stacked) {
      experts_.push_back({en->layer, en->expert, en->proj, false, i, t.file_offset, tensors_[i].extent});
      continue;
    }
    // Stacked experts: ne = [ne0, ne1, n_expert]; the expert index is the outermost dimension, so
    // expert k is the contiguous slice [k * size / n, (k + 1) * size / n).
    if (t.n_dims != 3) {
      throw ModelError("expert tensor '" + t.name + "' has " + std::to_string(t.n_dims) +
                       " dimensions, expected 3 ([ne0, ne1, n_expert])");
    }
    uint64_t n = t.ne[2];
    if (declared && *declared != n) {
      throw ModelError("expert tensor '" + t.name + "' stacks " + std::to_string(n) + " experts but " +
                       file.architecture() + ".expert_count is " + std::to_string(*declared) +
                       "; the file is inconsistent");
    }
    if (t.size_bytes == 0) {
      // Also what bounds the work here: with non-empty slices that lie inside the file without
      // overlapping (the parser checks both), a hostile ne[2] cannot yield more slices than bytes.
      throw ModelError("expert tensor '" + t.name + "' holds no data (ne = [" + std::to_string(t.ne[0]) + ", " +
                       std::to_string(t.ne[1]) + ", " + std::to_string(n) + "]); the file is corrupt");
    }
    uint64_t slice = t.size_bytes / n;  // exact and >= 1 byte: size = row_bytes * ne1 * n
    for (uint64_t k = 0; k < n; ++k) {
      uint64_t off = t.file_offset + k * slice;
      experts_.push_back({en->layer, static_cast<uint32_t>(k), en->proj, true, i, off,
                          byte_range_to_extent(off, slice, lba_size_, start_lba_)});
    }
  }
  std::sort(experts_.begin(), experts_.end(), [](const ExpertExtent& a, const ExpertExtent& b) {
    return std::tie(a.layer, a.expert, a.proj) < std::tie(b.layer, b.expert, b.proj);
  });
}

const TensorExtent* LbaMap::find(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.tensor->name == name) return &t;
  }
  return nullptr;
}

const LayerExtent* LbaMap::layer(uint32_t index) const {
  auto it = std::lower_bound(layers_.begin(), layers_.end(), index,
                             [](const LayerExtent& l, uint32_t i) { return l.layer < i; });
  return it != layers_.end() && it->layer == index ? &*it : nullptr;
}

const ExpertExtent* LbaMap::expert(uint32_t layer, uint32_t expert, Projection proj) const {
  auto key = std::make_tuple(layer, expert, proj);
  auto it = std::lower_bound(experts_.begin(), experts_.end(), key, [](const ExpertExtent& e, const auto& k) {
    return std::tie(e.layer, e.expert, e.proj) < k;
  });
  if (it == experts_.end() || std::tie(it->layer, it->expert, it->proj) != key) return nullptr;
  return &*it;
}

}  // namespace gpunvme::model
