// PackedRanges (examples/llm/model/packed_ranges.h): the one map from a tensor's file offset to its place
// in a buffer holding only some of a layer's bytes (a MoE layer's dense tensors, interleaved with its
// experts in the file).
#include <catch2/catch_test_macros.hpp>

#include <stdexcept>

#include "examples/llm/model/packed_ranges.h"

using gpunvme::llm::PackedRanges;

TEST_CASE("packed ranges: sorted, joined across padding, apart across experts, each piece keeping its alignment") {
  // gpt-oss's order in a converted file: dense tensors, then an expert bias between expert matrices,
  // a router after them; given out of order, one empty.
  const PackedRanges p = PackedRanges::pack({{9'000'000, 9'000'100},  // router bias, after the experts
                                             {1'000, 5'000},          // attention
                                             {5'032, 6'000},          // its next tensor, past 32 bytes of padding
                                             {3'000'000, 3'004'096},  // an expert bias between matrices
                                             {7'000, 7'000}});        // empty: dropped
  REQUIRE(p.pieces.size() == 3);
  CHECK(p.pieces[0].begin == 1'000);
  CHECK(p.pieces[0].end == 6'000);
  CHECK(p.pieces[1].begin == 3'000'000);
  CHECK(p.pieces[2].begin == 9'000'000);
  CHECK(p.file_bytes() == 5'000 + 4'096 + 100);
  for (size_t i = 0; i < p.pieces.size(); ++i) {
    const PackedRanges::Piece& q = p.pieces[i];
    CHECK(q.at % PackedRanges::kAlign == q.begin % PackedRanges::kAlign);
    if (i > 0) CHECK(q.at >= p.pieces[i - 1].at + (p.pieces[i - 1].end - p.pieces[i - 1].begin));
  }
  CHECK(p.bytes == p.pieces.back().at + 100);
  CHECK(p.bytes < p.file_bytes() + 3 * PackedRanges::kAlign);  // the buffer is the pieces, not the span
}

TEST_CASE("packed ranges: a tensor is found in its piece; bytes outside any piece are an error") {
  const PackedRanges p = PackedRanges::pack({{1'000, 5'000}, {3'000'000, 3'004'096}});
  CHECK(p.offset(1'000, 4'000) == p.pieces[0].at);
  CHECK(p.offset(3'000'010, 16) == p.pieces[1].at + 10);
  CHECK_THROWS_AS(p.offset(5'000, 1), std::logic_error);          // the gap after the first piece
  CHECK_THROWS_AS(p.offset(4'990, 32), std::logic_error);         // runs past a piece's end
  CHECK_THROWS_AS(p.offset(2'000'000, 1), std::logic_error);      // an expert's bytes: not held
  const PackedRanges whole = PackedRanges::span(0, 4096);
  CHECK(whole.offset(100, 8) == 100);
}
