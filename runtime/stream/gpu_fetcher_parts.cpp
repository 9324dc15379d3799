#include "runtime/stream/gpu_fetcher_parts.h"

#include <algorithm>
#include <string>

#include "host/error.h"
#include "runtime/model/stripe.h"

namespace gpunvme::stream {

uint64_t fetcher_volume_blocks(const model::StripeGeometry* stripe, size_t members, uint32_t lba_bytes,
                               uint64_t namespace_blocks) {
  if (members != (stripe ? stripe->members : 1u))
    throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: " + std::to_string(members) + " members for " +
                                                 (stripe ? "a striped set of " + std::to_string(stripe->members) : std::string("one namespace")));
  if (members > kMaxFetchMembers)
    throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: a striped set of " + std::to_string(members) +
                                                 " members; at most " + std::to_string(kMaxFetchMembers));
  if (!stripe) return namespace_blocks;
  if (stripe->lba_size != lba_bytes)
    throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: the striped set has " + std::to_string(stripe->lba_size) +
                                                 "-byte blocks, its members' namespaces " + std::to_string(lba_bytes));
  return stripe->logical_blocks();
}

FetcherPartTables build_part_tables(const ExpertCatalog& catalog, const ExpertLayout& layout, uint32_t max_blocks,
                                    const model::StripeGeometry* stripe) {
  if (stripe) fetcher_volume_blocks(stripe, stripe->members, stripe->lba_size, 0);  // at most kMaxFetchMembers
  const bool striped = stripe && stripe->members > 1;
  FetcherPartTables t;
  t.part_first.assign(1, 0);
  t.packed.assign(catalog.parts.size(), 0);
  t.slices.assign(size_t(catalog.n_layers) * kProjectionWords, 1);
  if (striped) t.piece_first.assign(1, 0);
  for (size_t k = 0; k < catalog.parts.size(); ++k) {
    const auto& ps = catalog.parts[k];
    uint64_t cmds = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      GpuPart g;
      g.lba = ps[i].extent.first_lba;
      g.blocks = uint32_t(ps[i].extent.lba_count);
      g.dest_rel = layout.part_offset(k, i);
      g.proj = uint32_t(ps[i].proj);
      if (g.proj >= kProjectionWords) throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: an expert part of an unknown projection");
      g.byte_in_first = ps[i].extent.byte_in_first;
      g.bytes = ps[i].extent.byte_length;
      t.parts.push_back(g);
      if (striped) {
        for (const model::StripePiece& p : model::split_blocks(*stripe, g.lba, g.blocks)) {
          t.pieces.push_back({p.first_lba, p.block_offset, uint32_t(p.lba_count), p.member});
          cmds += reads_of(p.lba_count, max_blocks);
        }
        t.piece_first.push_back(uint32_t(t.pieces.size()));
      } else {
        cmds += reads_of(g.blocks, max_blocks);
      }
      uint32_t& sl = t.slices[size_t(k / catalog.n_experts) * kProjectionWords + g.proj];
      sl = std::max(sl, stream::part_slices(g.bytes));
    }
    t.part_first.push_back(uint32_t(t.parts.size()));
    t.packed[k] = layout.packed_bytes(k);
    t.max_cmds_per_expert = std::max(t.max_cmds_per_expert, cmds);
  }
  return t;
}

}  // namespace gpunvme::stream
