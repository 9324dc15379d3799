#include "runtime/model/deploy_record.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>

#include "runtime/model/crc32c.h"
#include "runtime/model/model_error.h"

namespace gpunvme::model {

static_assert(std::endian::native == std::endian::little,
              "the record is serialized with memcpy of little-endian fields");

namespace {
constexpr size_t kHeaderBytes = sizeof(RecordHeader);
constexpr size_t kCrcOffset = offsetof(RecordHeader, record_crc);

std::string at(uint64_t lba) { return "the record block at LBA " + std::to_string(lba); }

std::string hex32(uint32_t v) {
  char b[9];
  std::snprintf(b, sizeof b, "%08x", v);
  return b;
}

uint64_t chunk_count(uint64_t bytes, uint32_t shift) { return (bytes + (uint64_t{1} << shift) - 1) >> shift; }

uint32_t block_crc(std::span<const uint8_t> block) {
  // CRC of the whole block with the CRC field taken as zero.
  static constexpr uint8_t kZero[4] = {0, 0, 0, 0};
  uint32_t c = crc32c(block.data(), kCrcOffset);
  c = crc32c(kZero, 4, c);
  return crc32c(block.data() + kCrcOffset + 4, block.size() - kCrcOffset - 4, c);
}
}  // namespace

uint64_t DeployRecord::chunk_length(uint64_t i) const {
  uint64_t off = chunk_offset(i);
  return off >= model_bytes ? 0 : std::min(chunk_bytes(), model_bytes - off);
}

size_t record_capacity(uint32_t lba_size) { return (lba_size - kHeaderBytes) / 4; }

uint32_t choose_chunk_shift(uint64_t model_bytes, uint32_t lba_size) {
  check_lba_size(lba_size);
  uint32_t shift = kMinChunkShift;
  while (chunk_count(model_bytes, shift) > record_capacity(lba_size)) ++shift;
  return shift;
}

uint64_t default_model_start_lba(uint32_t lba_size) {
  check_lba_size(lba_size);
  return std::max<uint64_t>(1, kDefaultModelOffsetBytes / lba_size);
}

std::vector<uint8_t> serialize_record(const DeployRecord& r) {
  check_lba_size(r.lba_size);
  if (r.chunk_shift < 9 || r.chunk_shift > 62) {
    throw ModelError("record chunk shift " + std::to_string(r.chunk_shift) + " is out of range [9, 62]");
  }
  if (r.chunk_crcs.size() != chunk_count(r.model_bytes, r.chunk_shift)) {
    throw ModelError("record has " + std::to_string(r.chunk_crcs.size()) + " chunk CRCs but a " +
                     std::to_string(r.model_bytes) + "-byte model needs " +
                     std::to_string(chunk_count(r.model_bytes, r.chunk_shift)));
  }
  if (r.chunk_crcs.size() > record_capacity(r.lba_size)) {
    throw ModelError("record needs " + std::to_string(r.chunk_crcs.size()) + " chunk CRCs, a " +
                     std::to_string(r.lba_size) + "-byte block holds " +
                     std::to_string(record_capacity(r.lba_size)) + "; use choose_chunk_shift()");
  }
  if (r.model_start_lba <= r.record_lba && r.record_lba < r.model_end_lba()) {
    throw ModelError("model at LBA " + std::to_string(r.model_start_lba) + ".." + std::to_string(r.model_end_lba()) +
                     " would overwrite the record at LBA " + std::to_string(r.record_lba));
  }
  RecordHeader h{};
  std::memcpy(h.magic, kRecordMagic, sizeof h.magic);
  h.format_version = kRecordVersion;
  h.header_bytes = kHeaderBytes;
  h.record_lba = r.record_lba;
  h.model_start_lba = r.model_start_lba;
  h.model_bytes = r.model_bytes;
  h.lba_size = r.lba_size;
  h.chunk_shift = r.chunk_shift;
  h.n_chunks = static_cast<uint32_t>(r.chunk_crcs.size());
  h.flags = r.in_progress ? kRecordInProgress : 0;
  // Truncate the name to 63 bytes without splitting a UTF-8 sequence (continuation bytes 10xxxxxx).
  size_t n = std::min<size_t>(r.name.size(), sizeof h.name - 1);
  while (n > 0 && n < r.name.size() && (static_cast<uint8_t>(r.name[n]) & 0xC0) == 0x80) --n;
  std::memcpy(h.name, r.name.data(), n);

  std::vector<uint8_t> block(r.lba_size, 0);
  std::memcpy(block.data(), &h, kHeaderBytes);
  std::memcpy(block.data() + kHeaderBytes, r.chunk_crcs.data(), r.chunk_crcs.size() * 4);
  uint32_t c = block_crc(block);
  std::memcpy(block.data() + kCrcOffset, &c, 4);
  return block;
}

bool has_record_magic(std::span<const uint8_t> block) {
  return block.size() >= 8 && std::memcmp(block.data(), kRecordMagic, 8) == 0;
}

uint32_t intact_record_block_size(std::span<const uint8_t> bytes) {
  if (bytes.size() < kHeaderBytes || !has_record_magic(bytes)) return 0;
  RecordHeader h;
  std::memcpy(&h, bytes.data(), kHeaderBytes);
  if (h.lba_size < 512 || h.lba_size > kMaxRecordBlock || !std::has_single_bit(h.lba_size) || h.lba_size > bytes.size())
    return 0;
  return block_crc(bytes.first(h.lba_size)) == h.record_crc ? h.lba_size : 0;
}

DeployRecord parse_record(std::span<const uint8_t> block, uint64_t at_lba) {
  if (block.size() < 512 || !std::has_single_bit(block.size())) {
    throw ModelError(at(at_lba) + " is " + std::to_string(block.size()) + " bytes, not one logical block");
  }
  if (!has_record_magic(block)) {
    throw ModelError(at(at_lba) + " does not start with \"GPUNVMEM\": no deploy record there");
  }
  RecordHeader h;
  std::memcpy(&h, block.data(), kHeaderBytes);
  // The CRC comes first so that any damaged field is reported as damage; its position (byte 124)
  // is fixed for all format versions.
  uint32_t stored = h.record_crc;
  if (block_crc(block) != stored) {
    throw ModelError("record checksum mismatch: " + at(at_lba) +
                     " is damaged or was overwritten; re-deploy the model or run verify with an explicit start LBA");
  }
  if (h.format_version != kRecordVersion) {
    throw ModelError(at(at_lba) + " has record format version " + std::to_string(h.format_version) +
                     ", this build reads version " + std::to_string(kRecordVersion) + "; upgrade gpunvme");
  }
  if (h.lba_size != block.size()) {
    throw ModelError(at(at_lba) + " was written for " + std::to_string(h.lba_size) +
                     "-byte blocks but the device uses " + std::to_string(block.size()) +
                     "; the namespace was reformatted, re-deploy the model");
  }
  if ((h.flags & ~kRecordInProgress) != 0) {
    throw ModelError(at(at_lba) + " has unknown flags 0x" + hex32(h.flags) + "; it was written by a newer gpunvme, upgrade");
  }
  // The CRC passed: what follows catches records that were written inconsistent.
  if (h.header_bytes != kHeaderBytes || h.record_lba != at_lba) {
    throw ModelError(at(at_lba) + " claims header size " + std::to_string(h.header_bytes) + " and LBA " +
                     std::to_string(h.record_lba) + "; it was copied from elsewhere or is corrupt");
  }
  if (h.chunk_shift < 9 || h.chunk_shift > 62 || h.n_chunks > record_capacity(h.lba_size) ||
      h.n_chunks != chunk_count(h.model_bytes, h.chunk_shift)) {
    throw ModelError(at(at_lba) + " has inconsistent chunking (shift " + std::to_string(h.chunk_shift) + ", " +
                     std::to_string(h.n_chunks) + " chunks for " + std::to_string(h.model_bytes) + " bytes)");
  }
  DeployRecord r;
  r.record_lba = h.record_lba;
  r.model_start_lba = h.model_start_lba;
  r.model_bytes = h.model_bytes;
  r.lba_size = h.lba_size;
  r.chunk_shift = h.chunk_shift;
  r.in_progress = (h.flags & kRecordInProgress) != 0;
  r.name.assign(h.name, strnlen(h.name, sizeof h.name));
  r.chunk_crcs.resize(h.n_chunks);
  std::memcpy(r.chunk_crcs.data(), block.data() + kHeaderBytes, h.n_chunks * 4u);
  if (r.model_start_lba <= r.record_lba && r.record_lba < r.model_end_lba()) {
    throw ModelError(at(at_lba) + " describes a model that overlaps the record itself; it is corrupt");
  }
  return r;
}

std::vector<uint32_t> compute_chunk_crcs(gguf::ByteSource& src, uint64_t model_bytes, uint32_t chunk_shift) {
  if (model_bytes > src.size()) {
    throw ModelError(src.describe() + " has " + std::to_string(src.size()) + " bytes, fewer than the " +
                     std::to_string(model_bytes) + " to checksum");
  }
  const uint64_t chunk = uint64_t{1} << chunk_shift;
  std::vector<uint32_t> crcs(chunk_count(model_bytes, chunk_shift), 0);
  std::vector<uint8_t> buf(std::min<uint64_t>(4u << 20, std::max<uint64_t>(model_bytes, 1)));
  for (uint64_t off = 0; off < model_bytes;) {
    // Never let one read span two chunks.
    uint64_t chunk_end = std::min(model_bytes, (off / chunk + 1) * chunk);
    auto n = static_cast<size_t>(std::min<uint64_t>(buf.size(), chunk_end - off));
    size_t got = src.read(off, buf.data(), n);
    if (got != n) {
      throw ModelError("short read from " + src.describe() + " at byte " + std::to_string(off) + " (" +
                       std::to_string(got) + " of " + std::to_string(n) + " bytes)");
    }
    uint64_t i = off / chunk;
    crcs[i] = crc32c(buf.data(), n, crcs[i]);
    off += n;
  }
  return crcs;
}

DeployRecord make_record(gguf::ByteSource& model, const std::string& name, uint32_t lba_size,
                         uint64_t model_start_lba) {
  DeployRecord r;
  r.model_start_lba = model_start_lba;
  r.model_bytes = model.size();
  r.lba_size = lba_size;
  r.chunk_shift = choose_chunk_shift(r.model_bytes, lba_size);
  r.name = name;
  r.chunk_crcs = compute_chunk_crcs(model, r.model_bytes, r.chunk_shift);
  return r;
}

std::vector<uint64_t> verify_model(const BlockIo& io, const DeployRecord& r) {
  if (io.lba_size != r.lba_size) {
    throw ModelError("record is for " + std::to_string(r.lba_size) + "-byte blocks, " + io.name + " uses " +
                     std::to_string(io.lba_size));
  }
  if (io.n_lbas != 0 && r.model_end_lba() > io.n_lbas) {
    throw ModelError("record says the model ends at LBA " + std::to_string(r.model_end_lba()) + " but " + io.name +
                     " has " + std::to_string(io.n_lbas) + " blocks");
  }
  DeviceByteSource src(io, r.model_start_lba, r.model_bytes);
  auto crcs = compute_chunk_crcs(src, r.model_bytes, r.chunk_shift);
  std::vector<uint64_t> bad;
  for (uint64_t i = 0; i < crcs.size(); ++i) {
    if (crcs[i] != r.chunk_crcs[i]) bad.push_back(i);
  }
  return bad;
}

}  // namespace gpunvme::model
