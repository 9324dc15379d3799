#include "runtime/model/chunk_verifier.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "runtime/model/crc32c.h"

namespace gpunvme::model {

ChunkVerifier::ChunkVerifier(const DeployRecord& r, std::vector<uint64_t> cuts)
    : model_bytes_(r.model_bytes), shift_(r.chunk_shift), recorded_(r.chunk_crcs), cuts_(std::move(cuts)) {
  if (r.chunk_crcs.size() != ((r.model_bytes + r.chunk_bytes() - 1) >> r.chunk_shift))
    throw std::invalid_argument("chunk verifier: the record's chunk count does not match its length");
  std::erase_if(cuts_, [&](uint64_t c) { return c == 0 || c >= model_bytes_; });
  std::sort(cuts_.begin(), cuts_.end());
  cuts_.erase(std::unique(cuts_.begin(), cuts_.end()), cuts_.end());
  chunks_.resize(recorded_.size());
}

ChunkVerifier::Range ChunkVerifier::chunk_range(uint64_t chunk) const {
  const uint64_t b = chunk << shift_;
  return {b, std::min<uint64_t>(uint64_t{1} << shift_, model_bytes_ - b)};
}

std::vector<ChunkVerifier::Range> ChunkVerifier::cut(uint64_t offset, uint64_t bytes) const {
  std::vector<Range> out;
  const uint64_t end = offset + bytes;
  auto next_cut = std::upper_bound(cuts_.begin(), cuts_.end(), offset);
  for (uint64_t at = offset; at < end;) {
    uint64_t stop = std::min(end, ((at >> shift_) + 1) << shift_);
    if (next_cut != cuts_.end() && *next_cut < stop) stop = *next_cut;
    out.push_back({at, stop - at});
    at = stop;
    while (next_cut != cuts_.end() && *next_cut <= at) ++next_cut;
  }
  return out;
}

bool ChunkVerifier::needed(uint64_t offset, uint64_t bytes) const {
  const uint64_t i = chunk_of(offset);
  if (i >= chunks_.size()) return false;
  const Chunk& c = chunks_[i];
  return c.state == State::kPending && !c.pieces.contains({offset, bytes});
}

ChunkVerifier::State ChunkVerifier::add(uint64_t offset, uint64_t bytes, uint32_t crc) {
  const uint64_t i = chunk_of(offset);
  if (bytes == 0 || i >= chunks_.size() || offset + bytes > model_bytes_ || chunk_of(offset + bytes - 1) != i)
    throw std::invalid_argument("chunk verifier: model bytes " + std::to_string(offset) + ".." + std::to_string(offset + bytes) +
                                " are not inside one chunk of the " + std::to_string(model_bytes_) + "-byte model");
  Chunk& c = chunks_[i];
  if (c.state != State::kPending) return c.state;
  const auto [it, fresh] = c.pieces.try_emplace({offset, bytes}, crc);
  if (!fresh) {
    if (it->second != crc) decide(i, c, crc, true);
    return c.state;
  }
  c.piece_bytes += bytes;
  try_decide(i, c);
  return c.state;
}

// Walks the pieces in offset order keeping, for every reachable end, the CRC of one exact tiling of
// the chunk up to it (a position is final before any piece starting there is reached, as every piece
// ending there starts before it). Pieces are few per chunk (its tensors, experts and cut points).
void ChunkVerifier::try_decide(uint64_t index, Chunk& c) {
  const Range r = chunk_range(index);
  if (c.piece_bytes < r.bytes) return;
  std::map<uint64_t, uint32_t> reach{{r.offset, 0u}};  // the CRC of zero bytes is 0
  for (const auto& [key, crc] : c.pieces) {
    const auto at = reach.find(key.first);
    if (at == reach.end()) continue;
    reach.try_emplace(key.first + key.second, crc32c_combine(at->second, crc, key.second));
  }
  const auto whole = reach.find(r.end());
  if (whole != reach.end()) decide(index, c, whole->second, false);
}

void ChunkVerifier::decide(uint64_t index, Chunk& c, uint32_t read, bool unstable) {
  if (!unstable && read == recorded_[index]) {
    c.state = State::kVerified;
    ++verified_;
  } else {
    c.state = State::kMismatch;
    mismatches_.push_back({index, recorded_[index], read, unstable});
  }
  c.pieces.clear();  // decided: nothing more to combine
}

std::vector<ChunkVerifier::Range> ChunkVerifier::uncovered(std::span<const Range> planned) const {
  std::vector<Range> have(planned.begin(), planned.end());
  for (uint64_t i = 0; i < chunks_.size(); ++i) {
    if (chunks_[i].state != State::kPending) have.push_back(chunk_range(i));
    else
      for (const auto& [key, crc] : chunks_[i].pieces) have.push_back({key.first, key.second});
  }
  std::sort(have.begin(), have.end(), [](const Range& a, const Range& b) { return a.offset < b.offset; });
  std::vector<Range> gaps;
  uint64_t at = 0;
  for (const Range& h : have) {
    if (h.offset > at) gaps.push_back({at, std::min(h.offset, model_bytes_) - at});
    at = std::max(at, h.end());
    if (at >= model_bytes_) break;
  }
  if (at < model_bytes_) gaps.push_back({at, model_bytes_ - at});
  std::erase_if(gaps, [](const Range& g) { return g.bytes == 0; });
  return gaps;
}

}  // namespace gpunvme::model
