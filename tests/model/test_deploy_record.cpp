// The on-device deploy record: layout, round trip, every corruption, verify and detection.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "runtime/model/crc32c.h"
#include "runtime/model/deploy_record.h"
#include "runtime/model/detect.h"
#include "runtime/model/model_error.h"
#include "tests/gguf/gguf_builder.h"
#include "tests/model/mem_device.h"

using namespace gpunvme;
using namespace gpunvme::model;
using namespace gguf_test;
using model_test::MemDevice;
using Catch::Matchers::ContainsSubstring;

namespace {

DeployRecord sample(uint32_t lba_size) {
  DeployRecord r;
  r.model_start_lba = default_model_start_lba(lba_size);
  r.model_bytes = 5ull * (1ull << 30) + 12345;  // 5 GiB + change: 81 chunks of 64 MiB
  r.lba_size = lba_size;
  r.chunk_shift = choose_chunk_shift(r.model_bytes, lba_size);
  r.name = "Gemma 3 270m";
  for (uint64_t i = 0; i < (r.model_bytes + r.chunk_bytes() - 1) / r.chunk_bytes(); ++i) {
    r.chunk_crcs.push_back(static_cast<uint32_t>(0x9E3779B9u * (i + 1)));
  }
  return r;
}

std::string parse_error(const std::vector<uint8_t>& block, uint64_t lba = 0) {
  try {
    (void)parse_record(block, lba);
  } catch (const ModelError& e) {
    return e.what();
  }
  return "";
}

Built tiny_model() {
  Spec s;
  s.kvs = {kv_str("general.name", "tiny"), kv_str("general.architecture", "llama")};
  s.tensors = {{"token_embd.weight", {64, 20}, 0, 64 * 20 * 4}, {"blk.0.attn_q.weight", {256, 3}, 12, 144 * 3}};
  return build(s);
}

}  // namespace

TEST_CASE("record geometry: capacity, chunk size, default start", "[record]") {
  CHECK(record_capacity(512) == 96);
  CHECK(record_capacity(4096) == 992);
  CHECK(choose_chunk_shift(0, 512) == 26);
  CHECK(choose_chunk_shift(96ull << 26, 512) == 26);
  CHECK(choose_chunk_shift((96ull << 26) + 1, 512) == 27);
  CHECK(choose_chunk_shift(400ull * 1000 * 1000 * 1000, 4096) == 29);  // 400 GB -> 512 MiB chunks
  CHECK(default_model_start_lba(512) == 2048);
  CHECK(default_model_start_lba(4096) == 256);
}

TEST_CASE("record round trip", "[record]") {
  uint32_t bs = GENERATE(512u, 4096u);
  auto r = sample(bs);
  auto block = serialize_record(r);
  REQUIRE(block.size() == bs);
  CHECK(std::memcmp(block.data(), "GPUNVMEM", 8) == 0);
  auto back = parse_record(block, 0);
  CHECK(back.model_start_lba == r.model_start_lba);
  CHECK(back.model_bytes == r.model_bytes);
  CHECK(back.lba_size == bs);
  CHECK(back.chunk_shift == r.chunk_shift);
  CHECK(back.name == r.name);
  CHECK(back.chunk_crcs == r.chunk_crcs);
  CHECK(back.chunk_length(back.n_chunks() - 1) == r.model_bytes - (back.n_chunks() - 1) * back.chunk_bytes());
  // Fixed layout: fields at their documented offsets.
  uint64_t start;
  std::memcpy(&start, block.data() + 24, 8);
  CHECK(start == r.model_start_lba);
  uint32_t lba;
  std::memcpy(&lba, block.data() + 40, 4);
  CHECK(lba == bs);
}

TEST_CASE("long names are cut at 63 bytes on a UTF-8 boundary", "[record]") {
  auto r = sample(512);
  r.name = std::string(62, 'a') + "\xc3\xa9" + "tail";  // 'é' would straddle byte 63
  auto back = parse_record(serialize_record(r), 0);
  CHECK(back.name == std::string(62, 'a'));
}

TEST_CASE("every single-byte corruption of the record is detected", "[record]") {
  auto block = serialize_record(sample(512));
  for (size_t i = 0; i < block.size(); ++i) {
    auto bad = block;
    bad[i] ^= 0x5A;
    INFO("byte " << i);
    std::string msg = parse_error(bad);
    if (i < 8) {
      CHECK_THAT(msg, ContainsSubstring("does not start with \"GPUNVMEM\""));
    } else {
      CHECK_THAT(msg, ContainsSubstring("record checksum mismatch: the record block at LBA 0 is damaged"));
    }
  }
}

TEST_CASE("consistent-but-wrong records are refused", "[record]") {
  auto r = sample(512);
  auto block = serialize_record(r);
  // Re-sign a modified block so that only the semantic checks can catch it.
  auto resign = [](std::vector<uint8_t> b) {
    std::memset(b.data() + 124, 0, 4);
    uint32_t c = crc32c(b.data(), b.size());
    std::memcpy(b.data() + 124, &c, 4);
    return b;
  };
  auto v2 = block;
  v2[8] = 2;
  CHECK_THAT(parse_error(resign(v2)), ContainsSubstring("format version 2"));
  CHECK_THAT(parse_error(block, 5), ContainsSubstring("copied from elsewhere"));
  auto small = block;
  small.resize(256);
  CHECK_THAT(parse_error(small), ContainsSubstring("not one logical block"));
  auto big = block;
  big.resize(4096, 0);
  CHECK_THAT(parse_error(big), ContainsSubstring("record checksum mismatch"));
  auto chunks = block;
  chunks[48] = 3;  // n_chunks
  CHECK_THAT(parse_error(resign(chunks)), ContainsSubstring("inconsistent chunking"));
  // Serialize-side validation.
  auto overlap = r;
  overlap.model_start_lba = 0;
  CHECK_THROWS_WITH(serialize_record(overlap), ContainsSubstring("would overwrite the record"));
  auto missing = r;
  missing.chunk_crcs.pop_back();
  CHECK_THROWS_WITH(serialize_record(missing), ContainsSubstring("chunk CRCs but"));
  auto too_many = r;
  too_many.chunk_shift = 20;
  too_many.chunk_crcs.assign((too_many.model_bytes + (1ull << 20) - 1) >> 20, 0);
  CHECK_THROWS_WITH(serialize_record(too_many), ContainsSubstring("use choose_chunk_shift()"));
}

TEST_CASE("make_record, verify_model and detect_model on an in-memory device", "[record][detect]") {
  uint32_t bs = GENERATE(512u, 4096u);
  auto model = tiny_model();
  MemDevice dev(bs, 4096);
  uint64_t start = default_model_start_lba(bs);
  dev.put(start, model.bytes);
  gguf::MemorySource src(model.bytes, "tiny.gguf");
  auto r = make_record(src, "tiny", bs, start);
  CHECK(r.n_chunks() == 1);
  CHECK(r.chunk_crcs[0] == crc32c(model.bytes.data(), model.bytes.size()));

  SECTION("plain dd without seek: GGUF at LBA 0") {
    MemDevice raw(bs, 4096);
    raw.put(0, model.bytes);
    auto m = detect_model(raw.io);
    CHECK(m.kind == DetectedModel::Kind::kRawGguf);
    CHECK(m.start_lba == 0);
    auto f = read_model_header(raw.io, m);
    CHECK(f.model_name() == "tiny");
    CHECK(f.data_end() == model.bytes.size());
  }
  SECTION("dd with seek=1 (1 MiB), no record") {
    auto m = detect_model(dev.io);
    CHECK(m.kind == DetectedModel::Kind::kRawGguf);
    CHECK(m.start_lba == start);
  }
  SECTION("no model; then a start LBA hint") {
    MemDevice empty(bs, 4096);
    auto m = detect_model(empty.io);
    CHECK(m.kind == DetectedModel::Kind::kNone);
    CHECK_THROWS_WITH(read_model_header(empty.io, m), ContainsSubstring("no model on memdev"));
    empty.put(7, model.bytes);
    m = detect_model(empty.io, 7);
    CHECK(m.kind == DetectedModel::Kind::kRawGguf);
    CHECK(m.start_lba == 7);
  }
  SECTION("with a record: exact length, verify clean, then a damaged chunk") {
    dev.io.write(0, 1, serialize_record(r).data());
    auto m = detect_model(dev.io);
    REQUIRE(m.kind == DetectedModel::Kind::kRecord);
    CHECK(m.start_lba == start);
    CHECK(m.byte_bound == model.bytes.size());
    CHECK_THAT(m.describe(), ContainsSubstring("model 'tiny'"));
    auto f = read_model_header(dev.io, m);
    CHECK(f.tensors().size() == 2);
    CHECK(f.file_size() == model.bytes.size());
    CHECK(verify_model(dev.io, r).empty());
    dev.bytes[start * bs + model.bytes.size() - 1] ^= 1;  // last byte of the model
    CHECK(verify_model(dev.io, r) == std::vector<uint64_t>{0});
  }
  SECTION("record pointing at overwritten bytes, damaged record") {
    dev.io.write(0, 1, serialize_record(r).data());
    dev.bytes[start * bs] = 'X';
    CHECK_THROWS_WITH(detect_model(dev.io), ContainsSubstring("no GGUF magic there"));
    dev.bytes[start * bs] = 'G';
    dev.bytes[120] ^= 1;  // a reserved byte
    CHECK_THROWS_WITH(detect_model(dev.io), ContainsSubstring("record checksum mismatch"));
  }
}

TEST_CASE("a record read with the other block size names the block size to use, not damage", "[record][detect]") {
  // The same bytes as a namespace of 4096-byte and of 512-byte blocks (an emu: image opened with and
  // without lba=4096): the record of one, read as the other, fails its CRC over the reader's block.
  auto model = tiny_model();
  for (const auto& [written, read] : {std::pair{4096u, 512u}, std::pair{512u, 4096u}}) {
    INFO("written with " << written << ", read with " << read);
    MemDevice w(written, (4u << 20) / written);
    const uint64_t start = default_model_start_lba(written);
    w.put(start, model.bytes);
    gguf::MemorySource src(model.bytes, "tiny.gguf");
    w.io.write(0, 1, serialize_record(make_record(src, "tiny", written, start)).data());
    MemDevice r(read, (4u << 20) / read);
    r.bytes = w.bytes;
    r.io.name = "emu:/tmp/models.img";
    CHECK_THROWS_WITH(detect_model(r.io),
                      ContainsSubstring("this image was written with " + std::to_string(written) + "-byte blocks") &&
                          ContainsSubstring(written == 4096 ? "add lba=4096 to the device string" : "drop lba=4096"));
    r.io.name = "vfio:0000:01:00.0";
    CHECK_THROWS_WITH(detect_model(r.io), ContainsSubstring("the namespace was reformatted since the deploy"));
    r.bytes[120] ^= 1;  // damaged as well: damage it is
    CHECK_THROWS_WITH(detect_model(r.io), ContainsSubstring("record checksum mismatch"));
    CHECK(detect_model(w.io).kind == DetectedModel::Kind::kRecord);  // read as written: found
  }
}

TEST_CASE("chunked CRCs over several chunks, verify finds the bad one", "[record]") {
  MemDevice dev(512, 64);
  for (size_t i = 0; i < dev.bytes.size(); ++i) dev.bytes[i] = static_cast<uint8_t>(i * 7);
  DeployRecord r;
  r.model_start_lba = 8;
  r.model_bytes = 20000;  // 5 chunks of 4 KiB, last partial
  r.lba_size = 512;
  r.chunk_shift = 12;
  r.name = "small-chunks";
  std::vector<uint8_t> model(dev.bytes.begin() + 8 * 512, dev.bytes.begin() + 8 * 512 + 20000);
  gguf::MemorySource src(model);
  r.chunk_crcs = compute_chunk_crcs(src, r.model_bytes, r.chunk_shift);
  REQUIRE(r.chunk_crcs.size() == 5);
  CHECK(r.chunk_crcs[1] == crc32c(model.data() + 4096, 4096));
  CHECK(r.chunk_crcs[4] == crc32c(model.data() + 16384, 20000 - 16384));
  auto back = parse_record(serialize_record(r), 0);
  CHECK(verify_model(dev.io, back).empty());
  dev.bytes[8 * 512 + 3 * 4096 + 100] ^= 0x80;
  CHECK(verify_model(dev.io, back) == std::vector<uint64_t>{3});
  dev.io.lba_size = 4096;
  CHECK_THROWS_WITH(verify_model(dev.io, back), ContainsSubstring("record is for 512-byte blocks"));
}
