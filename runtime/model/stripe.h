// Striped sets (RAID-0): one model image laid over N namespaces, so N drives stream a layer at once.
//
// Each member holds a stripe record at its LBA 0 (StripeHeader below) naming the set: a random set id,
// its member index, the member count, the stripe unit, the LBA size, how many data blocks every
// member gives the set, and the set's generation. A member's data region starts 1 MiB in
// (kStripeDataOffsetBytes). The set's *logical volume* is the members' data regions interleaved unit
// by unit:
//   logical block L -> stripe s = L / unit_blocks, member s % N, member LBA data_start + (s / N) *
//   unit_blocks + L % unit_blocks.
// The logical volume is an ordinary namespace for everything above it: a deploy record at its LBA 0
// and the GGUF 4 KiB in (kStripedModelStartBytes), found by detect_model, mapped by LbaMap (logical
// LBAs). Only what issues commands (the BlockIo below, the layer streamer) splits a logical extent
// into per-member extents (split_extent), and the bytes land where they would from one drive.
//
// Generations: the set id names the set for its whole life (a re-deploy onto the same layout keeps
// it), so it cannot tell a member saved before a re-deploy (a backup image, a swapped drive) from
// one written with the others: both would open as the set and the engine would read two models.
// Every deploy therefore writes a new generation into every member's record: a number, one past the
// highest the members held (1 for a new set), and a random deploy id (two copies of one set deployed
// apart reach the same number but not the same id). Every reader (ls, verify, the engine: StripeSet)
// requires all members to hold the same generation and refuses the older ones by name; only the
// deploy's own layout check (read_member_records) reads past a difference, since a re-deploy repairs it.
//
// Opening checks every member's record against its position: a member given in the wrong place,
// one missing, one given twice, a member of another set or of another generation, or a device that
// is no member at all is an error that names the device and the fix. A member opened alone is
// refused by detect_model.
//
// Block layout, format version 2 (little-endian; StripeHeader below, the rest of the block zero):
//   0   char[8]  magic "GPUNVMES"      40  u32  LBA size
//   8   u32      format version (2)    44  u32  reserved (0)
//   12  u32      header bytes (88)     48  u64  data start LBA (on every member)
//   16  u64      set id                56  u32  reserved (0)
//   24  u32      member index          60  u32  CRC-32C of the whole block, this field as 0
//   28  u32      member count          64  u64  data blocks per member
//   32  u32      stripe unit blocks    72  u64  generation number
//   36  u32      reserved (0)          80  u64  deploy id (random, new at every deploy)
// Version 1 (header bytes 72: no generation) was written before generations existed; it reads as
// generation 0, deploy id 0, so a set laid then still opens, and the first deploy onto it with this
// version writes generation 1 everywhere: a version-1 member restored into that set is then refused
// like any older generation. (Two version-1 copies of one set cannot be told apart: that is what
// version 2 adds.) A version newer than this build's is refused, naming the version.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/model/block_io.h"
#include "runtime/model/lba_map.h"

namespace gpunvme::model {

inline constexpr char kStripeMagic[8] = {'G', 'P', 'U', 'N', 'V', 'M', 'E', 'S'};
inline constexpr uint32_t kStripeVersion = 2;
inline constexpr uint32_t kStripeVersionNoGeneration = 1;  // still read: generation 0
inline constexpr uint64_t kStripeDataOffsetBytes = 1u << 20;
// Where a deploy puts the model in a set's logical volume by default: right after its deploy record,
// 4 KiB-aligned (the drives' page), not 1 MiB in as on one namespace: the members' own 1 MiB already
// lies before their data, so a second MiB would only be lost (a model of N x (member - 1 MiB) fits).
inline constexpr uint64_t kStripedModelStartBytes = 4096;
inline constexpr uint64_t kDefaultStripeUnitBytes = 1u << 20;  // dense models; the largest default_stripe_unit gives
inline constexpr uint64_t kMinDefaultStripeUnitBytes = 128u << 10;  // the smallest it gives
inline constexpr uint32_t kMaxStripeMembers = 16;

struct StripeHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t header_bytes;
  uint64_t set_id;
  uint32_t member_index;
  uint32_t member_count;
  uint32_t unit_blocks;
  uint32_t reserved0;
  uint32_t lba_size;
  uint32_t reserved1;
  uint64_t data_start_lba;
  uint32_t reserved2;
  uint32_t record_crc;
  uint64_t member_data_blocks;
  uint64_t generation;
  uint64_t deploy_id;
};
static_assert(sizeof(StripeHeader) == 88);
static_assert(offsetof(StripeHeader, set_id) == 16);
static_assert(offsetof(StripeHeader, member_index) == 24);
static_assert(offsetof(StripeHeader, unit_blocks) == 32);
static_assert(offsetof(StripeHeader, lba_size) == 40);
static_assert(offsetof(StripeHeader, data_start_lba) == 48);
static_assert(offsetof(StripeHeader, record_crc) == 60);
static_assert(offsetof(StripeHeader, member_data_blocks) == 64);
static_assert(offsetof(StripeHeader, generation) == 72);
static_assert(offsetof(StripeHeader, deploy_id) == 80);
inline constexpr uint32_t kStripeHeaderBytesNoGeneration = 72;  // version 1

// The set as every member's record describes it (member_index aside).
struct StripeGeometry {
  uint64_t set_id = 0;
  uint32_t members = 1;
  uint32_t unit_blocks = 0;
  uint32_t lba_size = 512;
  uint64_t data_start_lba = 0;
  uint64_t member_data_blocks = 0;

  uint64_t unit_bytes() const { return uint64_t(unit_blocks) * lba_size; }
  uint64_t logical_blocks() const { return member_data_blocks * members; }
  bool operator==(const StripeGeometry&) const = default;
};

// Which deploy wrote the records (see "Generations" above); all members of a set that opens agree.
struct StripeGeneration {
  uint64_t number = 0;     // 1 for a new set, one more at every deploy; 0: a version-1 record
  uint64_t deploy_id = 0;  // random, new at every deploy
  bool operator==(const StripeGeneration&) const = default;
};

// The generation a deploy writes: one past `previous` (the newest the members hold; none for a new
// set), with a fresh random deploy id.
StripeGeneration next_generation(std::optional<StripeGeneration> previous);
// A random 64-bit id (set ids, deploy ids).
uint64_t random_stripe_id();

struct StripeRecord {
  StripeGeometry geometry;
  uint32_t member_index = 0;
  StripeGeneration generation;
};

// The stripe unit a new set gets for `file` when none is asked for (gpunvme deploy, llm_make_model,
// emu:gen): a quarter of the model's smallest routed-expert slice (one expert's part of an
// ffn_*_exps tensor, or a whole per-expert tensor: LbaMap::experts()), rounded down to a power of
// two and kept within [128 KiB, 1 MiB]; 1 MiB for a model without routed experts, or one whose experts
// LbaMap cannot cut (the engine refuses that file anyway). Why: a token fetches its experts slice by
// slice, and a slice not much larger than the unit lies on one member or two, so a layer's slices
// split unevenly over the drives and the layer waits for the busier one. Qwen3-30B-A3B's 0.88 MB
// slices reached 81 % of the 2 x PCIe 4 bound with 1 MiB units and 91 % with 128 KiB, while
// Qwen3-235B-A22B's 3.5 MB slices did as well with either (docs/performance.md section 3): four units
// a slice or more spread it over the members. Dense layers are hundreds of MB and keep 1 MiB, the
// drives' transfer size; 128 KiB is the smallest unit measured. Every result is a power of two of
// 128 KiB or more, so a multiple of the LBA size (a power of two: 512 B or 4 KiB on NVMe; a larger one
// is refused by make_stripe_geometry, naming --stripe-unit). Qwen3-30B-A3B Q4_K: 128 KiB; Qwen3-235B-A22B Q4_K: 512 KiB; Mixtral-8x7B, gpt-oss: 1 MiB.
uint64_t default_stripe_unit(const gguf::GgufFile& file);

// One block of geometry.lba_size bytes.
std::vector<uint8_t> serialize_stripe_record(const StripeRecord& r);
bool has_stripe_magic(std::span<const uint8_t> block);
// Validates magic, version, CRC and the fields; throws ModelError naming `device` and the field.
// A version-1 record reads as generation 0.
StripeRecord parse_stripe_record(std::span<const uint8_t> block, const std::string& device);

// The geometry for N members of `lba_size` blocks, the smallest holding `member_blocks` blocks, with a
// stripe unit of `unit_bytes` (a multiple of the LBA size, at most 4 GiB). Throws ModelError naming
// the fix for a bad unit, too many members or members too small for one unit.
StripeGeometry make_stripe_geometry(uint32_t members, uint32_t lba_size, uint64_t member_blocks, uint64_t unit_bytes,
                                    uint64_t set_id);

// One member's part of a logical extent: blocks [first_lba, first_lba + lba_count) of `member`,
// which are the extent's blocks from `block_offset` on (so they land at dest + block_offset * lba).
struct StripePiece {
  uint32_t member = 0;
  uint64_t first_lba = 0;
  uint64_t lba_count = 0;
  uint64_t block_offset = 0;
  bool operator==(const StripePiece&) const = default;
};
// Logical blocks [lba, lba + count) cut at stripe-unit boundaries, in logical order; runs that stay
// contiguous on one member (one member) are merged. Throws ModelError past the logical volume.
std::vector<StripePiece> split_blocks(const StripeGeometry& g, uint64_t lba, uint64_t count);
// The same per member: the pieces of `member`, each an Extent whose byte_in_first / byte_length say which
// of the logical extent's bytes it carries (the first piece keeps byte_in_first; the length is clipped).
struct MemberExtent {
  model::Extent extent;   // member LBAs
  uint64_t block_offset;  // blocks into the logical extent
};
std::vector<std::vector<MemberExtent>> split_extent(const StripeGeometry& g, const model::Extent& logical);

// Throws ModelError naming the member and the fix unless there are g.members of them, all with
// g.lba_size blocks and at least g.data_start_lba + g.member_data_blocks of them.
void check_stripe_members(std::span<const BlockIo> members, const StripeGeometry& g);
// Writes the stripe record of every member (member i = members[i]) after check_stripe_members.
void write_stripe_records(std::span<const BlockIo> members, const StripeGeometry& g, const StripeGeneration& generation);

// Every member's record, each checked against its position as StripeSet does (one set, in order, each
// once, none missing, one geometry, none truncated), except that the members may hold different
// generations: what a deploy's layout check needs, since a re-deploy is the fix for that. Throws
// ModelError naming the device and the fix. records[i] is members[i]'s.
std::vector<StripeRecord> read_member_records(std::span<const BlockIo> members);
// The newest generation among `records` (the number first, then the deploy id: any order will do
// for "the next one", which only has to differ from all of them).
StripeGeneration newest_generation(std::span<const StripeRecord> records);
// Throws ModelError unless every member holds the same generation: names each member older than the
// newest (which generation it holds and which the others do), or, for one number reached by two
// deploys, both members; and the fix (re-deploy onto the whole set, or restore the member written with
// the others).
void check_one_generation(std::span<const StripeRecord> records, std::span<const BlockIo> members);

// An opened striped set: every member's record checked against its position, and the logical volume
// as a BlockIo (whole-block reads and writes split over the members' BlockIos, which it keeps).
class StripeSet {
 public:
  // Throws ModelError naming the device and the fix: a member without a record ("not a member of a
  // striped set"), a member of another set, at the wrong position, given twice, a set with members
  // missing or extra, members that disagree on the geometry, members of different generations
  // (read_member_records, check_one_generation). One member is allowed only when the set has one member.
  explicit StripeSet(std::vector<BlockIo> members);
  // A set laid out as `g` whose records are not written yet (check_stripe_members only): what a
  // deploy checks and writes through before it commits the members to the set (generation `gen`).
  StripeSet(std::vector<BlockIo> members, const StripeGeometry& g, const StripeGeneration& gen);
  StripeSet(const StripeSet&) = delete;  // logical() calls back into this object
  StripeSet& operator=(const StripeSet&) = delete;
  const StripeGeometry& geometry() const { return g_; }
  const StripeGeneration& generation() const { return gen_; }
  uint32_t members() const { return g_.members; }
  const BlockIo& member(uint32_t i) const { return members_.at(i); }
  std::span<const BlockIo> member_ios() const { return members_; }
  // The logical volume (valid while this object lives).
  const BlockIo& logical() const { return logical_; }

 private:
  void read_records();  // g_ and gen_ from the members' records, every one checked
  void make_logical();

  std::vector<BlockIo> members_;
  StripeGeometry g_;
  StripeGeneration gen_;
  BlockIo logical_;
};

// Whether the device's LBA 0 holds a stripe record (a member of a striped set).
bool is_stripe_member(const BlockIo& io);
// "emu:/a.img namespace 1 is member 2 of striped set ... (2 members ...), generation 3": for the error
// a reader of one member alone throws (detect_model).
std::string describe_member(const StripeRecord& r, const std::string& device);

}  // namespace gpunvme::model
