// The chunk verifier (runtime/model/chunk_verifier.h): a model's bytes checked against the record's
// chunk CRCs from pieces added in any order, overlapping or not, with the never-read gaps found and
// filled; a flipped byte or two different reads of the same bytes is a mismatch naming the chunk.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "runtime/gguf/byte_source.h"
#include "runtime/model/chunk_verifier.h"
#include "runtime/model/crc32c.h"

using namespace gpunvme;
using model::ChunkVerifier;

namespace {

// A record of `bytes` random bytes in chunks of 2^shift (the deploy's are 64 MiB; any shift >= 9 is valid).
struct Model {
  std::vector<uint8_t> bytes;
  model::DeployRecord record;
  Model(uint64_t n, uint32_t shift, uint32_t seed) : bytes(n) {
    std::mt19937 rng(seed);
    for (auto& b : bytes) b = uint8_t(rng());
    gguf::MemorySource src(bytes);
    record.model_start_lba = 8;
    record.model_bytes = n;
    record.chunk_shift = shift;
    record.chunk_crcs = model::compute_chunk_crcs(src, n, shift);
  }
  uint32_t crc(const ChunkVerifier::Range& r) const { return model::crc32c(bytes.data() + r.offset, r.bytes); }
};

}  // namespace

TEST_CASE("chunk verifier: cut() splits at chunk boundaries and cut points") {
  Model m(10000, 12, 1);  // chunks of 4096: [0, 4096) [4096, 8192) [8192, 10000)
  ChunkVerifier v(m.record, {5000, 100, 100, 0, 20000, 4096});
  using R = ChunkVerifier::Range;
  CHECK(v.chunks() == 3);
  CHECK(v.chunk_range(2) == R{8192, 1808});
  CHECK(v.cut(0, 10000) == std::vector<R>{{0, 100}, {100, 3996}, {4096, 904}, {5000, 3192}, {8192, 1808}});
  CHECK(v.cut(50, 100) == std::vector<R>{{50, 50}, {100, 50}});
  CHECK(v.cut(4096, 0).empty());
  CHECK(v.cut(5000, 10) == std::vector<R>{{5000, 10}});
}

TEST_CASE("chunk verifier: pieces in any order verify every chunk once it is covered") {
  std::mt19937 rng(3);
  for (int round = 0; round < 20; ++round) {
    Model m(20000 + rng() % 30000, 12, round);
    std::vector<uint64_t> cuts;
    for (int i = 0; i < 30; ++i) cuts.push_back(rng() % m.bytes.size());
    ChunkVerifier v(m.record, cuts);
    std::vector<ChunkVerifier::Range> pieces = v.cut(0, m.bytes.size());
    std::shuffle(pieces.begin(), pieces.end(), rng);
    INFO("round " << round << ", " << pieces.size() << " pieces over " << v.chunks() << " chunks");
    for (size_t i = 0; i < pieces.size(); ++i) {
      const uint64_t c = v.chunk_of(pieces[i].offset);
      // The chunk is decided exactly when its last piece arrives.
      const bool last = std::none_of(pieces.begin() + i + 1, pieces.end(), [&](const auto& p) { return v.chunk_of(p.offset) == c; });
      CHECK(v.needed(pieces[i].offset, pieces[i].bytes));
      CHECK(v.add(pieces[i].offset, pieces[i].bytes, m.crc(pieces[i])) ==
            (last ? ChunkVerifier::State::kVerified : ChunkVerifier::State::kPending));
      CHECK(!v.needed(pieces[i].offset, pieces[i].bytes));
    }
    CHECK(v.verified() == v.chunks());
    CHECK(v.mismatches().empty());
    CHECK(v.uncovered({}).empty());
  }
}

TEST_CASE("chunk verifier: overlapping pieces verify over an exact tiling; none, and the chunk waits") {
  Model m(4096, 12, 5);  // one chunk
  using R = ChunkVerifier::Range;
  {
    ChunkVerifier v(m.record);
    for (const R& r : {R{50, 1000}, R{0, 100}, R{1050, 3046}, R{100, 1000}, R{1100, 2996}})
      v.add(r.offset, r.bytes, m.crc(r));
    CHECK(v.state(0) == ChunkVerifier::State::kVerified);  // [0,100) [100,1100) [1100,4096)
  }
  {
    ChunkVerifier v(m.record);
    for (const R& r : {R{0, 100}, R{50, 4046}}) v.add(r.offset, r.bytes, m.crc(r));
    CHECK(v.state(0) == ChunkVerifier::State::kPending);  // covered, but [50, 100) is read twice: no tiling
    CHECK(v.add(100, 3996, m.crc({100, 3996})) == ChunkVerifier::State::kVerified);
  }
  {
    ChunkVerifier v(m.record);  // the same piece twice, with the same CRC: no change
    v.add(0, 100, m.crc({0, 100}));
    v.add(0, 100, m.crc({0, 100}));
    CHECK(v.add(100, 3996, m.crc({100, 3996})) == ChunkVerifier::State::kVerified);
  }
}

TEST_CASE("chunk verifier: a flipped byte or two different reads is a mismatch naming the chunk") {
  Model m(3 * 4096 + 7, 12, 9);
  Model bad = m;
  bad.bytes[4096 + 1234] ^= 0x10;
  ChunkVerifier v(m.record, {4096 + 2000});
  for (const auto& r : v.cut(0, m.bytes.size())) v.add(r.offset, r.bytes, bad.crc(r));
  CHECK(v.verified() == 3);
  REQUIRE(v.mismatches().size() == 1);
  CHECK(v.mismatches()[0].chunk == 1);
  CHECK(v.mismatches()[0].recorded == m.record.chunk_crcs[1]);
  CHECK(v.mismatches()[0].read == bad.crc(v.chunk_range(1)));
  CHECK(!v.mismatches()[0].unstable);
  CHECK(v.state(1) == ChunkVerifier::State::kMismatch);
  CHECK(!v.needed(4096, 10));  // decided: nothing more to read for it

  ChunkVerifier u(m.record);
  u.add(0, 100, m.crc({0, 100}));
  CHECK(u.add(0, 100, bad.crc({0, 100}) ^ 1) == ChunkVerifier::State::kMismatch);
  REQUIRE(u.mismatches().size() == 1);
  CHECK(u.mismatches()[0].unstable);
  CHECK_THROWS_AS(u.add(4000, 200, 0), std::invalid_argument);  // spans chunks 0 and 1
  CHECK_THROWS_AS(u.add(m.bytes.size() - 3, 5, 0), std::invalid_argument);  // past the model
}

TEST_CASE("chunk verifier: the never-read gaps are found, and reading them verifies the rest") {
  Model m(5 * 4096, 12, 13);
  ChunkVerifier v(m.record);
  using R = ChunkVerifier::Range;
  // Readers: a host read of [100, 5000) done; a GPU reader will read [9000, 12000) and [12000, 13000).
  for (const R& r : v.cut(100, 4900)) v.add(r.offset, r.bytes, m.crc(r));
  const std::vector<R> planned{{9000, 3000}, {12000, 1000}};
  CHECK(v.uncovered(planned) == std::vector<R>{{0, 100}, {5000, 4000}, {13000, 5 * 4096 - 13000}});
  for (const R& g : v.uncovered(planned))
    for (const R& r : v.cut(g.offset, g.bytes)) v.add(r.offset, r.bytes, m.crc(r));
  CHECK(v.verified() == 3);  // chunks 0, 1 and 4; 2 and 3 wait for the planned reads
  CHECK(v.uncovered(planned).empty());
  for (const R& p : planned)
    for (const R& r : v.cut(p.offset, p.bytes)) v.add(r.offset, r.bytes, m.crc(r));
  CHECK(v.verified() == 5);
  CHECK(v.uncovered({}).empty());
}
