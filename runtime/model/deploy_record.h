// The self-describing deploy record: one logical block on the device that says where a model is,
// how long it is, and the CRC-32C of every chunk of its bytes, so `verify` and `ls` need nothing
// but the device.
//
// Placement (decided here, used by deploy/detect):
//   * The record lives at LBA 0. The model's byte 0 lives at a later LBA, by default 1 MiB in
//     (LBA 2048 with 512-byte blocks, LBA 256 with 4 KiB blocks; see default_model_start_lba()).
//   * So the model bytes can be written by plain dd and the record added afterwards:
//         dd if=model.gguf of=/dev/nvme0n1 bs=1M seek=1 oflag=direct conv=fsync
//     (seek=K puts the model at byte K MiB = LBA K*2^20/lba_size; GNU dd drops O_DIRECT for the
//     final partial block by itself).
//   * A model written by plain dd without seek has its GGUF magic at LBA 0 and no record; a
//     model written with seek and no record is found at the 1 MiB default or a given start LBA.
//     detect_model() (detect.h) handles all three.
//   * Overwriting LBA 0 with a GGUF (plain dd) destroys the record, so a stale record can never
//     describe a model written over it at LBA 0. A model re-written at the record's start LBA
//     without updating the record is caught by verify (chunk CRCs).
//
// Block layout (little-endian; RecordHeader below, then the chunk CRC array, then zero padding):
//   0   char[8]  magic "GPUNVMEM"        56  char[64] model name (general.name, NUL-padded,
//   8   u32      format version (1)                   at most 63 bytes, cut on a UTF-8 boundary)
//   12  u32      header bytes (128)      120 u32      reserved (0)
//   16  u64      record LBA              124 u32      CRC-32C of the whole block, this field as 0
//   24  u64      model start LBA         128 u32[n]   CRC-32C of chunk i of the model bytes
//   32  u64      model byte length       ...          zero up to the end of the block
//   40  u32      LBA size
//   44  u32      log2(chunk bytes)
//   48  u32      chunk count n
//   52  u32      flags: bit 0 = deploy in progress (kRecordInProgress); other bits 0
// A deploy first writes an in-progress record (flag set, CRCs zero) and replaces it with the final
// one only after every model byte is durable, so a reader that finds the flag knows the bytes
// behind it are unfinished (deploy interrupted, failed or still running); detect.h refuses it.
// Chunks are 64 MiB, doubled until the CRC array fits the block: (lba_size - 128) / 4 entries,
// i.e. 96 chunks (6 GiB at 64 MiB) in a 512-byte block and 992 (62 GiB) in a 4 KiB block; a
// 400 GB model in 4 KiB blocks gets 512 MiB chunks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/gguf/byte_source.h"
#include "runtime/model/block_io.h"

namespace gpunvme::model {

inline constexpr char kRecordMagic[8] = {'G', 'P', 'U', 'N', 'V', 'M', 'E', 'M'};
inline constexpr uint32_t kRecordVersion = 1;
inline constexpr uint32_t kMinChunkShift = 26;  // 64 MiB
inline constexpr uint64_t kRecordLba = 0;
inline constexpr uint64_t kDefaultModelOffsetBytes = 1u << 20;
inline constexpr uint32_t kRecordInProgress = 1u << 0;  // RecordHeader::flags

struct RecordHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t header_bytes;
  uint64_t record_lba;
  uint64_t model_start_lba;
  uint64_t model_bytes;
  uint32_t lba_size;
  uint32_t chunk_shift;
  uint32_t n_chunks;
  uint32_t flags;
  char name[64];
  uint32_t reserved1;
  uint32_t record_crc;
};
static_assert(sizeof(RecordHeader) == 128);
static_assert(offsetof(RecordHeader, format_version) == 8);
static_assert(offsetof(RecordHeader, record_lba) == 16);
static_assert(offsetof(RecordHeader, model_start_lba) == 24);
static_assert(offsetof(RecordHeader, model_bytes) == 32);
static_assert(offsetof(RecordHeader, lba_size) == 40);
static_assert(offsetof(RecordHeader, chunk_shift) == 44);
static_assert(offsetof(RecordHeader, n_chunks) == 48);
static_assert(offsetof(RecordHeader, name) == 56);
static_assert(offsetof(RecordHeader, record_crc) == 124);

struct DeployRecord {
  uint64_t record_lba = kRecordLba;
  uint64_t model_start_lba = 0;
  uint64_t model_bytes = 0;
  uint32_t lba_size = 512;
  uint32_t chunk_shift = kMinChunkShift;
  std::string name;                  // at most 63 bytes are stored
  std::vector<uint32_t> chunk_crcs;  // ceil(model_bytes / chunk_bytes) entries
  bool in_progress = false;          // kRecordInProgress: the model bytes are not all written yet

  uint64_t chunk_bytes() const { return uint64_t{1} << chunk_shift; }
  uint64_t n_chunks() const { return chunk_crcs.size(); }
  // Byte range of chunk i within the model.
  uint64_t chunk_offset(uint64_t i) const { return i << chunk_shift; }
  uint64_t chunk_length(uint64_t i) const;
  uint64_t model_end_lba() const { return model_start_lba + (model_bytes + lba_size - 1) / lba_size; }
};

// CRC entries that fit one record block.
size_t record_capacity(uint32_t lba_size);
// Smallest chunk shift >= kMinChunkShift whose chunk count fits the block.
uint32_t choose_chunk_shift(uint64_t model_bytes, uint32_t lba_size);
// LBA of byte kDefaultModelOffsetBytes (1 MiB).
uint64_t default_model_start_lba(uint32_t lba_size);

// One block of lba_size bytes. Throws ModelError if the record is inconsistent (too many chunks,
// model overlapping the record block, ...).
std::vector<uint8_t> serialize_record(const DeployRecord& r);
// True when the block starts with the record magic (cheap probe before parse_record).
bool has_record_magic(std::span<const uint8_t> block);
// Validates everything (magic, version, CRC, sizes) and throws ModelError naming the field and `at_lba`.
DeployRecord parse_record(std::span<const uint8_t> block, uint64_t at_lba);
// The block size of the record `bytes` start with, where its CRC checks over that many bytes (`bytes`
// holding at least kMaxRecordBlock, or the device's whole block when smaller); 0 where there is no
// intact record. A device opened with another block size than the deploy's (an emu: image of 4096-byte
// blocks without lba=4096) sees the record's CRC fail over its own block: this tells it apart from damage.
inline constexpr uint32_t kMaxRecordBlock = 64 << 10;
uint32_t intact_record_block_size(std::span<const uint8_t> bytes);

// Streams model bytes [0, model_bytes) from `src` in 4 MiB reads and returns one CRC per chunk.
std::vector<uint32_t> compute_chunk_crcs(gguf::ByteSource& src, uint64_t model_bytes, uint32_t chunk_shift);
// A complete record for a host file about to be deployed at model_start_lba.
DeployRecord make_record(gguf::ByteSource& model, const std::string& name, uint32_t lba_size,
                         uint64_t model_start_lba);
// Re-reads the model from the device and returns the indices of chunks whose CRC differs.
std::vector<uint64_t> verify_model(const BlockIo& io, const DeployRecord& r);

}  // namespace gpunvme::model
