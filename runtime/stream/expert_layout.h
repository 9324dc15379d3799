// Where experts live and where they sit in a fetcher's scratchpad: the one place the CPU
// ExpertFetcher and the GpuExpertFetcher validate a catalog, pack an expert's parts and size the
// scratchpad, so both fetchers agree byte for byte.
//
//   ExpertCatalog  every (layer, expert)'s parts as block extents (from an LbaMap or synthetic).
//   ExpertLayout   built once from a catalog: each part checked against the extent rules
//                  (plan/extent_rules.h), each expert's parts packed from 0 with every part page
//                  aligned, the slot size (largest expert, page rounded), the cache capacity and the
//                  scratchpad size. Expert k's parts land at slot_base + part_offset(k, i).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/lba_map.h"

namespace gpunvme::stream {

enum class ExpertParts : uint8_t { kAll, kDownOnly };

struct ExpertPart {
  model::Projection proj;
  model::Extent extent;
};

// Where every (layer, expert) lives: its parts as block extents.
struct ExpertCatalog {
  uint32_t n_layers = 0;   // layer indices 0..n_layers-1 (layers without experts have no parts)
  uint32_t n_experts = 0;  // experts per layer
  std::vector<std::vector<ExpertPart>> parts;  // [layer * n_experts + expert]

  const std::vector<ExpertPart>& of(uint32_t layer, uint32_t expert) const;
  // From an LbaMap (stacked *_exps slices or per-expert tensors), keeping the parts `which` asks for.
  static ExpertCatalog from_map(const model::LbaMap& map, ExpertParts which = ExpertParts::kAll);
};

struct ExpertLayoutSpec {
  uint32_t lba_bytes = 512;
  uint64_t namespace_blocks = 0;
  uint64_t page = 4096;                 // every part starts page aligned
  uint32_t max_experts_per_fetch = 8;   // >= 1
  uint64_t cache_bytes = 0;             // 0: no cache (max_experts_per_fetch packed slots)
  uint32_t min_cache_experts = 0;       // a cache of at least this many slots whatever cache_bytes holds
  uint32_t max_parts = 0;               // parts per expert; 0: any number
  uint64_t max_part_blocks = 0;         // blocks per part; 0: any number
};

class ExpertLayout {
 public:
  // Throws kInvalidArgument, prefixed with `who` ("expert fetcher"), naming the expert and the rule
  // it breaks: an extent rule, too many parts, no expert with any bytes, or a cache budget that
  // cannot hold one fetch.
  ExpertLayout(const ExpertCatalog& catalog, const ExpertLayoutSpec& spec, const std::string& who);

  // Offset of part i of expert `key` (layer * n_experts + expert) from the expert's first byte.
  uint64_t part_offset(uint64_t key, size_t i) const { return part_offsets_[part_first_[key] + i]; }
  // End of the expert's last block, from its first byte (0 for an expert with no parts).
  uint64_t data_end(uint64_t key) const { return data_end_[key]; }
  // The same, page rounded: the scratchpad bytes the expert spans.
  uint64_t packed_bytes(uint64_t key) const { return (data_end_[key] + page_ - 1) / page_ * page_; }
  uint64_t slot_bytes() const { return slot_bytes_; }  // largest expert, page rounded; > 0
  uint32_t capacity() const { return capacity_; }      // cache slots; 0 without a cache
  uint64_t scratch_bytes() const { return scratch_bytes_; }
  uint64_t keys() const { return data_end_.size(); }

 private:
  uint64_t page_ = 4096;
  std::vector<uint32_t> part_first_;     // [keys + 1]
  std::vector<uint64_t> part_offsets_;
  std::vector<uint64_t> data_end_;       // [keys]
  uint64_t slot_bytes_ = 0;
  uint32_t capacity_ = 0;
  uint64_t scratch_bytes_ = 0;
};

}  // namespace gpunvme::stream
