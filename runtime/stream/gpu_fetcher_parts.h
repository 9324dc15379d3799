// The GPU expert fetcher's part tables (gpu_fetcher_state.h), built on the host from the layout the
// CPU fetcher also uses (expert_layout.h). Host code only, so the CPU suite tests the striped split.
//
// On a striped set (model/stripe.h) a part's logical blocks are cut at stripe-unit boundaries into
// per-member pieces by the set's own mapping (model::split_blocks, the one the streamer's plans and
// the logical BlockIo use); the part itself stays whole (what consumers see: offsets, bytes,
// projection), its reads come from the pieces, and every count of reads counts the pieces' reads.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/stream/expert_fetcher.h"
#include "runtime/stream/expert_layout.h"
#include "runtime/stream/gpu_fetcher_state.h"

namespace gpunvme::model {
struct StripeGeometry;  // model/stripe.h: not included here, the .cu files that include this are C++17
}

namespace gpunvme::stream {

// The blocks of the volume the catalog's extents address: the namespace's `namespace_blocks`, or a
// striped set's logical volume. Throws kInvalidArgument unless `members` is the set's member count
// (1 without a set) and `lba_bytes` its LBA size.
uint64_t fetcher_volume_blocks(const model::StripeGeometry* stripe, size_t members, uint32_t lba_bytes,
                               uint64_t namespace_blocks);

struct FetcherPartTables {
  std::vector<uint32_t> part_first;   // [keys + 1]: each (layer, expert)'s first part
  std::vector<GpuPart> parts;
  std::vector<uint64_t> packed;       // [keys]: scratchpad bytes of each expert, page rounded
  std::vector<uint32_t> slices;       // [layer * kProjectionWords + proj]: the most slices of a part
  uint64_t max_cmds_per_expert = 0;   // reads of the expert that needs the most, `max_blocks` a read
  // A striped set only (empty otherwise): part p's pieces are pieces[piece_first[p] .. piece_first[p + 1]).
  std::vector<uint32_t> piece_first;  // [parts + 1]
  std::vector<GpuPiece> pieces;
};

// Every (layer, expert)'s parts at the layout's offsets; reads of at most `max_blocks` blocks, none
// crossing a stripe unit of `stripe` (null, or a set of one member: one namespace, no pieces).
// Throws kInvalidArgument for a part of a projection the readiness words do not have, ModelError
// for a part past the set's logical volume.
FetcherPartTables build_part_tables(const ExpertCatalog& catalog, const ExpertLayout& layout, uint32_t max_blocks,
                                    const model::StripeGeometry* stripe = nullptr);

// The reads of `blocks` blocks at `max_blocks` a read.
inline uint64_t reads_of(uint64_t blocks, uint32_t max_blocks) { return (blocks + max_blocks - 1) / max_blocks; }

}  // namespace gpunvme::stream
