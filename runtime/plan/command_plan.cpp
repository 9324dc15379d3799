#include "runtime/plan/command_plan.h"

#include <algorithm>
#include <string>

#include "host/error.h"
#include "runtime/model/tensor_names.h"

namespace gpunvme::plan {

namespace {
uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }
void check_align(uint64_t align) {
  if (align < 4 || (align & (align - 1)) != 0)
    throw Error(ErrorKind::kInvalidArgument, "plan: destination alignment " + std::to_string(align) +
                                                 " is not a power of two >= 4");
}
}  // namespace

std::optional<uint64_t> CommandPlan::locate(uint64_t device_byte, uint32_t lba_bytes) const {
  for (const Piece& p : pieces) {
    const uint64_t first = p.source.first_lba * lba_bytes;
    const uint64_t end = p.source.end_lba() * lba_bytes;
    if (device_byte >= first && device_byte < end) return p.dest_offset + (device_byte - first);
  }
  return std::nullopt;
}

std::vector<uint64_t> pack_extents(std::span<const model::Extent> extents, uint32_t lba_bytes, uint64_t align,
                                   uint64_t base, uint64_t* end) {
  check_align(align);
  std::vector<uint64_t> out;
  out.reserve(extents.size());
  uint64_t at = align_up(base, align);
  uint64_t last_end = base;
  for (const model::Extent& e : extents) {
    out.push_back(at);
    last_end = at + e.lba_count * lba_bytes;
    at = align_up(last_end, align);
  }
  if (end) *end = last_end;
  return out;
}

uint64_t packed_bytes(std::span<const model::Extent> extents, uint32_t lba_bytes, uint64_t align) {
  uint64_t end = 0;
  pack_extents(extents, lba_bytes, align, 0, &end);
  return end;
}

void append_extent(CommandPlan& plan, const model::Extent& e, uint64_t dest_offset, const PlanGeometry& g,
                   const PrpTable& table) {
  check_extent(e, g.lba_bytes, g.namespace_blocks, "plan");
  const uint64_t lba = g.lba_bytes;
  const uint64_t bytes = e.lba_count * lba;
  if ((dest_offset & 3) != 0 || dest_offset + bytes > table.dest_bytes() || dest_offset + bytes < dest_offset)
    throw Error(ErrorKind::kInvalidArgument, "plan: extent of " + std::to_string(e.lba_count) + " blocks at LBA " +
                                                 std::to_string(e.first_lba) + " does not fit the " +
                                                 std::to_string(table.dest_bytes()) + "-byte destination at offset " +
                                                 std::to_string(dest_offset));
  if (g.max_blocks == 0 || g.max_blocks > nvme::kMaxBlocksPerCommand)
    throw Error(ErrorKind::kInvalidArgument, "plan: max_blocks " + std::to_string(g.max_blocks) + " is outside 1..65536");
  Piece piece;
  piece.source = e;
  piece.dest_offset = dest_offset;
  piece.data_offset = dest_offset + e.byte_in_first;
  piece.first_command = uint32_t(plan.commands.size());
  uint64_t done = 0;
  while (done < e.lba_count) {
    uint32_t n = uint32_t(std::min<uint64_t>(g.max_blocks, e.lba_count - done));
    const uint64_t off = dest_offset + done * lba;
    // The table's one unreachable window (prp_table.h): end the command a little earlier.
    while (!table.command_fits(off, uint64_t(n) * lba)) {
      if (n == 1)
        throw Error(ErrorKind::kInvalidArgument, "plan: no PRP window for one block at destination offset " +
                                                     std::to_string(off) + " (offset not 4-byte aligned?)");
      --n;
    }
    const nvme::PrpPair prp = table.prps(off, uint64_t(n) * lba);
    plan.commands.push_back(nvme::make_read(g.nsid, e.first_lba + done, n, prp.prp1, prp.prp2));
    done += n;
  }
  piece.n_commands = uint32_t(plan.commands.size()) - piece.first_command;
  plan.pieces.push_back(piece);
  plan.read_bytes += bytes;
  plan.dest_bytes = std::max(plan.dest_bytes, dest_offset + bytes);
}

CommandPlan build_plan(std::span<const model::Extent> extents, const PlanGeometry& g, const PrpTable& table,
                       uint64_t align, uint64_t base) {
  CommandPlan plan;
  const std::vector<uint64_t> at = pack_extents(extents, g.lba_bytes, align, base, nullptr);
  uint64_t estimate = 0;
  for (const auto& e : extents) estimate += e.lba_count / g.max_blocks + 2;
  plan.commands.reserve(estimate);
  plan.pieces.reserve(extents.size());
  for (size_t i = 0; i < extents.size(); ++i) append_extent(plan, extents[i], at[i], g, table);
  return plan;
}

std::vector<std::vector<model::Extent>> layer_extents(const model::LbaMap& map, bool skip_experts) {
  std::vector<std::vector<model::Extent>> out;
  const uint64_t lba = map.lba_size();
  for (const model::LayerExtent& L : map.layers()) {
    if (L.layer >= out.size()) out.resize(L.layer + 1);
    std::vector<model::Extent>& runs = out[L.layer];
    // Device byte ranges of the layer's tensors, ascending.
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (size_t ti : L.tensors) {
      const model::TensorExtent& t = map.tensors()[ti];
      if (t.extent.byte_length == 0) continue;
      if (skip_experts && model::parse_expert_name(t.tensor->name)) continue;
      const uint64_t b = t.extent.first_lba * lba + t.extent.byte_in_first;
      ranges.emplace_back(b, b + t.extent.byte_length);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 0; i < ranges.size();) {
      uint64_t b = ranges[i].first, end = ranges[i].second;
      size_t j = i + 1;
      // Merge while the next range starts in (or right after) the current run's last block.
      while (j < ranges.size() && ranges[j].first / lba <= (end + lba - 1) / lba) {
        end = std::max(end, ranges[j].second);
        ++j;
      }
      model::Extent e;
      e.first_lba = b / lba;
      e.byte_in_first = uint32_t(b % lba);
      e.byte_length = end - b;
      e.lba_count = (end + lba - 1) / lba - e.first_lba;
      runs.push_back(e);
      i = j;
    }
  }
  return out;
}

}  // namespace gpunvme::plan
