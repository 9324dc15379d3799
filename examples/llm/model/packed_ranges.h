#pragma once
// Byte ranges of the model file laid one after another in one buffer: how the GPU holds the part of a
// layer it reads every token. A MoE layer's dense tensors need not be contiguous in the file: GGUF
// puts no order on tensors, and converted files interleave them with the routed experts (gpt-oss's
// expert biases sit between the expert matrices; a router may follow them). Holding the file's span
// from the first dense byte to the last would hold the experts too, so every holder (VRAM, pinned RAM,
// a streamed slot, the benchmark's mmap loader) keeps just these pieces, and a WeightView finds a
// tensor through this one map. A tensor outside every piece is an error, never a wild pointer.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace gpunvme::llm {

struct PackedRanges {
  struct Piece {
    uint64_t begin = 0, end = 0;  // file bytes [begin, end)
    uint64_t at = 0;              // where begin lies in the buffer
  };
  std::vector<Piece> pieces;  // ascending, disjoint
  uint64_t bytes = 0;         // the buffer: up to the last piece's end

  // Pieces this close in the file are held as one, the gap with them: a GGUF pads every tensor to its
  // alignment (32 bytes by default). Less than the smallest block (512 bytes), so that a joined piece
  // is also one run of the streaming plan's extents (plan::layer_extents joins ranges that share or
  // touch a block) and lies unbroken in a slot.
  static constexpr uint64_t kJoinGap = 256;
  // Each piece starts at its file offset modulo this in the buffer (whose base cudaMalloc aligns to
  // 256): every tensor keeps the alignment the file gave it, which the kernels' vector loads rely on.
  static constexpr uint64_t kAlign = 256;

  // The file ranges [first, second), in any order, joined where they overlap or nearly touch, packed.
  static PackedRanges pack(std::vector<std::pair<uint64_t, uint64_t>> ranges);
  // One piece: file bytes [begin, end).
  static PackedRanges span(uint64_t begin, uint64_t end) { return pack({{begin, end}}); }

  // Buffer offset of file bytes [off, off + len); throws when they are not inside one piece.
  uint64_t offset(uint64_t off, uint64_t len) const;
  // The file bytes the pieces cover (what a copy of them reads).
  uint64_t file_bytes() const;
};

inline PackedRanges PackedRanges::pack(std::vector<std::pair<uint64_t, uint64_t>> ranges) {
  std::erase_if(ranges, [](const auto& r) { return r.second <= r.first; });
  std::sort(ranges.begin(), ranges.end());
  PackedRanges p;
  for (const auto& [b, e] : ranges) {
    if (!p.pieces.empty() && b <= p.pieces.back().end + kJoinGap) {
      Piece& last = p.pieces.back();
      if (e > last.end) p.bytes += e - last.end, last.end = e;
      continue;
    }
    const uint64_t start = (p.bytes + kAlign - 1) / kAlign * kAlign + b % kAlign;
    p.pieces.push_back({b, e, start});
    p.bytes = start + (e - b);
  }
  return p;
}

inline uint64_t PackedRanges::offset(uint64_t off, uint64_t len) const {
  // Few pieces (a handful per layer): a scan is as fast as a search.
  for (const Piece& q : pieces)
    if (off >= q.begin && off < q.end) {
      if (len > q.end - off) break;
      return q.at + (off - q.begin);
    }
  throw std::logic_error("model bytes [" + std::to_string(off) + ", " + std::to_string(off + len) +
                         ") are not among the bytes this buffer holds");
}

inline uint64_t PackedRanges::file_bytes() const {
  uint64_t s = 0;
  for (const Piece& q : pieces) s += q.end - q.begin;
  return s;
}

}  // namespace gpunvme::llm
