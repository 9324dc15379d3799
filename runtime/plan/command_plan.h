// Command plans: for a set of block extents and a destination buffer, the read commands that
// bring the extents into the buffer, built once, ready to submit. A submitter (CPU: host::QueuePair;
// GPU: a kernel) copies each 64-byte template into the SQ and stamps the command id; it does no
// address math. Extents are split by the per-command block limit (MDTS, the 16-bit NLB field and
// any further cap) and by the PRP table's one window rule (prp_table.h).
//
// Unaligned tensors: an extent is read as whole blocks; the consumer's bytes start `byte_in_first`
// bytes into the extent's first block. Piece::data_offset is where they start in the destination.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "driver/commands.h"
#include "runtime/model/lba_map.h"
#include "runtime/plan/extent_rules.h"
#include "runtime/plan/prp_table.h"

namespace gpunvme::plan {

struct PlanGeometry {
  uint32_t nsid = 1;
  uint32_t lba_bytes = 512;
  uint32_t max_blocks = 256;  // per command: min(MDTS, 65536, any cap)
  uint64_t namespace_blocks = kUnknownNamespaceBlocks;  // NSZE, for the extent rules (extent_rules.h)
};

// One requested extent as laid out in the destination.
struct Piece {
  model::Extent source;
  uint64_t dest_offset = 0;   // where its first block lands
  uint64_t data_offset = 0;   // dest_offset + byte_in_first: the consumer's first byte
  uint32_t first_command = 0; // index into CommandPlan::commands
  uint32_t n_commands = 0;
  uint64_t data_end() const { return data_offset + source.byte_length; }
};

struct CommandPlan {
  std::vector<nvme::SubmissionEntry> commands;  // cid 0; PRPs point into one PrpTable's buffer
  std::vector<Piece> pieces;                    // in request order
  uint64_t dest_bytes = 0;                      // destination bytes used (end of the last block)
  uint64_t read_bytes = 0;                      // bytes the commands transfer (whole blocks)

  // Destination offset of a device byte (LBA * lba_bytes + byte), if some piece read it.
  std::optional<uint64_t> locate(uint64_t device_byte, uint32_t lba_bytes) const;
};

// Destination offsets for `extents` packed in order, each block run starting at a multiple of
// `align` (a power of two >= 4; the controller page keeps every piece page aligned), from `base`.
// Returns the offsets and sets *end to the end of the last block.
std::vector<uint64_t> pack_extents(std::span<const model::Extent> extents, uint32_t lba_bytes, uint64_t align,
                                   uint64_t base, uint64_t* end);
// Destination bytes pack_extents would use.
uint64_t packed_bytes(std::span<const model::Extent> extents, uint32_t lba_bytes, uint64_t align);

// Appends the commands reading `extent` into the table's buffer at `dest_offset` (a multiple of 4)
// and a Piece for it. Throws kInvalidArgument if it breaks the extent rules (extent_rules.h) or does
// not fit the buffer.
void append_extent(CommandPlan& plan, const model::Extent& extent, uint64_t dest_offset, const PlanGeometry& g,
                   const PrpTable& table);

// The whole plan for `extents` packed into the table's buffer from `base`.
CommandPlan build_plan(std::span<const model::Extent> extents, const PlanGeometry& g, const PrpTable& table,
                       uint64_t align, uint64_t base = 0);

// Layers as extent lists, from an LbaMap: each layer's tensors in file order, adjacent or
// overlapping block ranges merged into one extent. `skip_experts` leaves MoE expert tensors out
// (they are fetched per token by the expert fetcher). Layers are indexed 0..max layer; a layer
// with no tensors gets an empty list.
std::vector<std::vector<model::Extent>> layer_extents(const model::LbaMap& map, bool skip_experts = false);

}  // namespace gpunvme::plan
