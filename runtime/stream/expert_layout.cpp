#include "runtime/stream/expert_layout.h"

#include <algorithm>

#include "host/error.h"
#include "runtime/plan/command_plan.h"
#include "runtime/plan/extent_rules.h"

namespace gpunvme::stream {

const std::vector<ExpertPart>& ExpertCatalog::of(uint32_t layer, uint32_t expert) const {
  if (layer >= n_layers || expert >= n_experts)
    throw Error(ErrorKind::kInvalidArgument, "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                                                 " does not exist (" + std::to_string(n_layers) + " layers, " +
                                                 std::to_string(n_experts) + " experts)");
  return parts[size_t(layer) * n_experts + expert];
}

ExpertCatalog ExpertCatalog::from_map(const model::LbaMap& map, ExpertParts which) {
  ExpertCatalog c;
  for (const model::ExpertExtent& e : map.experts()) {
    c.n_layers = std::max(c.n_layers, e.layer + 1);
    c.n_experts = std::max(c.n_experts, e.expert + 1);
  }
  c.parts.resize(size_t(c.n_layers) * c.n_experts);
  for (const model::ExpertExtent& e : map.experts()) {
    if (which == ExpertParts::kDownOnly && e.proj != model::Projection::kDown) continue;
    if (e.extent.byte_length == 0) continue;
    c.parts[size_t(e.layer) * c.n_experts + e.expert].push_back(ExpertPart{e.proj, e.extent});
  }
  return c;
}

ExpertLayout::ExpertLayout(const ExpertCatalog& catalog, const ExpertLayoutSpec& spec, const std::string& who)
    : page_(spec.page) {
  if (catalog.n_experts == 0) throw Error(ErrorKind::kInvalidArgument, who + ": the model has no experts");
  if (spec.max_experts_per_fetch == 0)
    throw Error(ErrorKind::kInvalidArgument, who + ": max_experts_per_fetch must be at least 1");
  if (catalog.parts.size() != size_t(catalog.n_layers) * catalog.n_experts)
    throw Error(ErrorKind::kInvalidArgument, who + ": the catalog has " + std::to_string(catalog.parts.size()) +
                                                 " entries for " + std::to_string(catalog.n_layers) + " layers of " +
                                                 std::to_string(catalog.n_experts) + " experts");
  part_first_.assign(1, 0);
  data_end_.resize(catalog.parts.size());
  for (size_t k = 0; k < catalog.parts.size(); ++k) {
    const auto& ps = catalog.parts[k];
    const std::string name = who + ": expert " + std::to_string(k % catalog.n_experts) + " of layer " +
                             std::to_string(k / catalog.n_experts);
    if (spec.max_parts > 0 && ps.size() > spec.max_parts)
      throw Error(ErrorKind::kInvalidArgument, name + " has " + std::to_string(ps.size()) + " slices; at most " +
                                                   std::to_string(spec.max_parts) + " are supported");
    std::vector<model::Extent> ex;
    for (size_t i = 0; i < ps.size(); ++i) {
      plan::check_extent(ps[i].extent, spec.lba_bytes, spec.namespace_blocks, name + " slice " + std::to_string(i));
      if (spec.max_part_blocks > 0 && ps[i].extent.lba_count > spec.max_part_blocks)
        throw Error(ErrorKind::kInvalidArgument, name + " slice " + std::to_string(i) + " is larger than " +
                                                     std::to_string(spec.max_part_blocks) + " blocks");
      ex.push_back(ps[i].extent);
    }
    const std::vector<uint64_t> at = plan::pack_extents(ex, spec.lba_bytes, page_, 0, &data_end_[k]);
    part_offsets_.insert(part_offsets_.end(), at.begin(), at.end());
    part_first_.push_back(uint32_t(part_offsets_.size()));
    slot_bytes_ = std::max(slot_bytes_, packed_bytes(k));
  }
  if (slot_bytes_ == 0) throw Error(ErrorKind::kInvalidArgument, who + ": every expert slice is empty");
  if (spec.cache_bytes > 0 || spec.min_cache_experts > 0) {
    const uint64_t slots = std::max<uint64_t>(spec.cache_bytes / slot_bytes_, spec.min_cache_experts);
    capacity_ = uint32_t(std::min<uint64_t>(slots, catalog.parts.size()));
    if (capacity_ < spec.max_experts_per_fetch)
      throw Error(ErrorKind::kInvalidArgument,
                  who + ": a cache of " + std::to_string(spec.cache_bytes) + " bytes holds " +
                      std::to_string(capacity_) + " experts of " + std::to_string(slot_bytes_) +
                      " bytes; one fetch needs room for " + std::to_string(spec.max_experts_per_fetch));
    scratch_bytes_ = uint64_t(capacity_) * slot_bytes_;
  } else {
    scratch_bytes_ = uint64_t(spec.max_experts_per_fetch) * slot_bytes_;
  }
}

}  // namespace gpunvme::stream
