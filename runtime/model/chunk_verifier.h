// Checks a model's bytes against the deploy record's chunk CRC-32Cs (deploy_record.h) from pieces
// read apart: a reader that has bytes [offset, offset + n) of the model in hand adds their CRC, in
// any order, from any reader (the host, GPU kernels), and once a chunk's pieces cover it exactly the
// verifier combines them (crc32c_combine) and compares the result with the record's CRC.
//
// Why pieces: chunks are 64 MiB or more and do not align with what readers read (layers, tensors,
// experts); a reader checks the bytes it reads anyway, when it reads them, and never reads a byte
// twice for the check. Why cut points: two readers whose ranges overlap in part ([0, 100) and
// [50, 150)) could cover a chunk with no exact tiling, and a piece's CRC cannot be split. So readers
// cut what they read at every cut point (cut(): the chunk boundaries and, given at construction, the
// boundaries of every range any reader reads, e.g. every tensor's start and end): their pieces are
// then whole "atoms" and any covering set of them tiles. Arbitrary pieces are still accepted: a
// chunk is checked over any exact tiling of its pieces (found by walking them in offset order), and
// an identical piece added twice with two CRCs is a mismatch (the device gave two answers).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "runtime/model/deploy_record.h"

namespace gpunvme::model {

class ChunkVerifier {
 public:
  struct Range {
    uint64_t offset = 0, bytes = 0;
    uint64_t end() const { return offset + bytes; }
    bool operator==(const Range&) const = default;
  };
  enum class State { kPending, kVerified, kMismatch };
  struct Mismatch {
    uint64_t chunk = 0;
    uint32_t recorded = 0;  // the record's CRC
    uint32_t read = 0;      // what the pieces combine to (or one of two reads that differ)
    bool unstable = false;  // two reads of the same bytes gave two CRCs
  };

  // `cuts`: model byte offsets every reader cuts its pieces at (any order, duplicates and offsets
  // outside the model ignored).
  explicit ChunkVerifier(const DeployRecord& r, std::vector<uint64_t> cuts = {});

  uint64_t chunks() const { return chunks_.size(); }
  uint64_t model_bytes() const { return model_bytes_; }
  Range chunk_range(uint64_t chunk) const;
  uint64_t chunk_of(uint64_t offset) const { return offset >> shift_; }
  // [offset, offset + bytes) cut at chunk boundaries and cut points, in order (empty ranges left out).
  std::vector<Range> cut(uint64_t offset, uint64_t bytes) const;
  // False when the piece's chunk is decided already (verified or mismatched) or this exact piece
  // was added: a reader need not compute its CRC.
  bool needed(uint64_t offset, uint64_t bytes) const;
  // The CRC-32C of model bytes [offset, offset + bytes), which must lie in one chunk and in the model
  // (else std::invalid_argument). Returns the chunk's state after it; a decided chunk ignores it.
  State add(uint64_t offset, uint64_t bytes, uint32_t crc);
  State state(uint64_t chunk) const { return chunks_.at(chunk).state; }
  uint64_t verified() const { return verified_; }
  const std::vector<Mismatch>& mismatches() const { return mismatches_; }
  // The parts of [0, model_bytes) that no added piece, no decided chunk and none of `planned` cover:
  // what must still be read for every chunk to be decided. Merged, in order.
  std::vector<Range> uncovered(std::span<const Range> planned) const;

 private:
  struct Chunk {
    State state = State::kPending;
    std::map<std::pair<uint64_t, uint64_t>, uint32_t> pieces;  // (offset, bytes) -> CRC
    uint64_t piece_bytes = 0;  // sum of the pieces' lengths: below the chunk's, no tiling can exist
  };
  void try_decide(uint64_t index, Chunk& c);
  void decide(uint64_t index, Chunk& c, uint32_t read, bool unstable);

  uint64_t model_bytes_ = 0;
  uint32_t shift_ = 0;
  std::vector<uint32_t> recorded_;
  std::vector<uint64_t> cuts_;  // sorted, unique, inside (0, model_bytes)
  std::vector<Chunk> chunks_;
  uint64_t verified_ = 0;
  std::vector<Mismatch> mismatches_;
};

}  // namespace gpunvme::model
