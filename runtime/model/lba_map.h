// Where every tensor of a GGUF file lives on a block device, given the LBA size and the LBA that
// holds the file's byte 0. Also groups tensors by layer (blk.N.*) and cuts MoE expert tensors into
// per-(layer, expert, projection) extents, so a streaming plan can fetch "layer 7" or
// "expert 3's down projection of layer 12" as whole-block reads.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/tensor_names.h"

namespace gpunvme::model {

// A byte range as whole blocks: read lba_count blocks from first_lba, the bytes start at
// byte_in_first within the first block and run for byte_length bytes.
struct Extent {
  uint64_t first_lba = 0;
  uint64_t lba_count = 0;
  uint32_t byte_in_first = 0;
  uint64_t byte_length = 0;

  uint64_t end_lba() const { return first_lba + lba_count; }  // exclusive
  bool operator==(const Extent&) const = default;
};

// Byte range [file_offset, file_offset + length) of a file stored from start_lba on.
Extent byte_range_to_extent(uint64_t file_offset, uint64_t length, uint32_t lba_size, uint64_t start_lba);

struct TensorExtent {
  const gguf::TensorInfo* tensor;  // points into the GgufFile, which must outlive the map
  Extent extent;
};

struct LayerExtent {
  uint32_t layer;
  std::vector<size_t> tensors;  // indices into LbaMap::tensors(), file order
  Extent extent;                // from the lowest tensor byte to the highest, as blocks
};

struct ExpertExtent {
  uint32_t layer;
  uint32_t expert;
  Projection proj;
  bool stacked;         // slice of a *_exps tensor (true) or a whole per-expert tensor (false)
  size_t tensor;        // index into LbaMap::tensors()
  uint64_t file_offset; // absolute byte offset of this expert's slice
  Extent extent;
};

class LbaMap {
 public:
  // Throws ModelError for a bad LBA size, a stacked-expert tensor that is not 3-D, or an expert
  // count that disagrees with <arch>.expert_count.
  LbaMap(const gguf::GgufFile& file, uint32_t lba_size, uint64_t start_lba);

  uint32_t lba_size() const { return lba_size_; }
  uint64_t start_lba() const { return start_lba_; }
  // The whole file up to the end of the last tensor.
  const Extent& model_extent() const { return model_; }
  const std::vector<TensorExtent>& tensors() const { return tensors_; }
  const std::vector<LayerExtent>& layers() const { return layers_; }  // ascending layer index
  const std::vector<size_t>& globals() const { return globals_; }     // non-layer tensors
  const std::vector<ExpertExtent>& experts() const { return experts_; }  // by (layer, expert, proj)

  const TensorExtent* find(std::string_view name) const;
  const LayerExtent* layer(uint32_t index) const;
  const ExpertExtent* expert(uint32_t layer, uint32_t expert, Projection proj) const;

 private:
  void add_experts(const gguf::GgufFile& file);

  uint32_t lba_size_;
  uint64_t start_lba_;
  Extent model_;
  std::vector<TensorExtent> tensors_;
  std::vector<LayerExtent> layers_;
  std::vector<size_t> globals_;
  std::vector<ExpertExtent> experts_;
};

}  // namespace gpunvme::model
