#include "runtime/model/stripe.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <random>

#include "runtime/model/crc32c.h"
#include "runtime/model/model_error.h"

namespace gpunvme::model {

static_assert(std::endian::native == std::endian::little, "the stripe record is serialized with memcpy");

namespace {
constexpr size_t kCrcOffset = offsetof(StripeHeader, record_crc);

uint32_t block_crc(std::span<const uint8_t> block) {
  static constexpr uint8_t kZero[4] = {0, 0, 0, 0};
  uint32_t c = crc32c(block.data(), kCrcOffset);
  c = crc32c(kZero, 4, c);
  return crc32c(block.data() + kCrcOffset + 4, block.size() - kCrcOffset - 4, c);
}

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return b;
}

std::string set_text(const StripeGeometry& g) {
  return "striped set " + hex64(g.set_id) + " (" + std::to_string(g.members) + " members, stripe unit " +
         std::to_string(g.unit_bytes()) + " bytes)";
}

std::string member_text(const StripeRecord& r) {
  return "member " + std::to_string(r.member_index + 1) + " of " + set_text(r.geometry);
}

std::string generation_text(const StripeGeneration& g) {
  return "generation " + std::to_string(g.number) + (g.number == 0 ? " (written before generations existed)" : "");
}

// The fix for members given wrongly: all of them, in order.
std::string order_fix(uint32_t n) {
  return "give all " + std::to_string(n) + " members, each once, in the order they were written (--device M1 --device M2 ...; "
         "`gpunvme ls --device M` names a member's place)";
}
}  // namespace

std::vector<uint8_t> serialize_stripe_record(const StripeRecord& r) {
  const StripeGeometry& g = r.geometry;
  check_lba_size(g.lba_size);
  if (g.members == 0 || r.member_index >= g.members || g.unit_blocks == 0)
    throw ModelError("stripe record: member " + std::to_string(r.member_index) + " of " + std::to_string(g.members) +
                     ", unit " + std::to_string(g.unit_blocks) + " blocks is not a valid set");
  StripeHeader h{};
  std::memcpy(h.magic, kStripeMagic, sizeof h.magic);
  h.format_version = kStripeVersion;
  h.header_bytes = sizeof(StripeHeader);
  h.set_id = g.set_id;
  h.member_index = r.member_index;
  h.member_count = g.members;
  h.unit_blocks = g.unit_blocks;
  h.lba_size = g.lba_size;
  h.data_start_lba = g.data_start_lba;
  h.member_data_blocks = g.member_data_blocks;
  h.generation = r.generation.number;
  h.deploy_id = r.generation.deploy_id;
  std::vector<uint8_t> block(g.lba_size, 0);
  std::memcpy(block.data(), &h, sizeof h);
  const uint32_t crc = block_crc(block);
  std::memcpy(block.data() + kCrcOffset, &crc, 4);
  return block;
}

bool has_stripe_magic(std::span<const uint8_t> block) {
  return block.size() >= sizeof kStripeMagic && std::memcmp(block.data(), kStripeMagic, sizeof kStripeMagic) == 0;
}

StripeRecord parse_stripe_record(std::span<const uint8_t> block, const std::string& device) {
  const std::string where = "the stripe record at LBA 0 of " + device;
  if (!has_stripe_magic(block) || block.size() < 512) throw ModelError(where + ": no stripe record magic");
  StripeHeader h;
  std::memcpy(&h, block.data(), sizeof h);
  if (h.format_version != kStripeVersion && h.format_version != kStripeVersionNoGeneration)
    throw ModelError(where + " has format version " + std::to_string(h.format_version) + "; this build reads versions " +
                     std::to_string(kStripeVersionNoGeneration) + " and " + std::to_string(kStripeVersion) +
                     ": use a matching gpunvme");
  const bool versioned = h.format_version == kStripeVersion;
  if (!versioned) h.generation = h.deploy_id = 0;  // version 1 ends at byte 72; the bytes after it are zero
  if (h.lba_size != block.size())
    throw ModelError(where + " was written with " + std::to_string(h.lba_size) + "-byte blocks but the device has " +
                     std::to_string(block.size()) + "-byte blocks now: open it with the LBA size it was written with "
                     "(emu: lba=" + std::to_string(h.lba_size) + "), or re-create the set");
  uint32_t stored;
  std::memcpy(&stored, block.data() + kCrcOffset, 4);
  if (block_crc(block) != stored)
    throw ModelError(where + " is damaged (its CRC does not match); re-create the set with llm_make_model or "
                     "`gpunvme deploy` over all its members");
  if (h.header_bytes != (versioned ? sizeof(StripeHeader) : kStripeHeaderBytesNoGeneration) || h.member_count == 0 || h.member_count > kMaxStripeMembers ||
      h.member_index >= h.member_count || h.unit_blocks == 0 || h.data_start_lba == 0 || h.member_data_blocks == 0 ||
      h.member_data_blocks % h.unit_blocks != 0)
    throw ModelError(where + " holds impossible fields (member " + std::to_string(h.member_index) + " of " +
                     std::to_string(h.member_count) + ", unit " + std::to_string(h.unit_blocks) +
                     " blocks); re-create the set");
  StripeRecord r;
  r.member_index = h.member_index;
  r.geometry = {h.set_id, h.member_count, h.unit_blocks, h.lba_size, h.data_start_lba, h.member_data_blocks};
  r.generation = {h.generation, h.deploy_id};
  return r;
}

uint64_t random_stripe_id() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

StripeGeneration next_generation(std::optional<StripeGeneration> previous) {
  return {previous ? previous->number + 1 : 1, random_stripe_id()};
}

uint64_t default_stripe_unit(const gguf::GgufFile& file) {
  uint64_t smallest = UINT64_MAX;
  try {
    const LbaMap map(file, 512, 0);  // slice sizes do not depend on the block size
    for (const ExpertExtent& e : map.experts())
      if (e.extent.byte_length) smallest = std::min(smallest, e.extent.byte_length);
  } catch (const ModelError&) {
    return kDefaultStripeUnitBytes;  // experts it cannot cut: no slices to spread
  }
  if (smallest == UINT64_MAX) return kDefaultStripeUnitBytes;
  return std::clamp<uint64_t>(std::bit_floor(smallest / 4), kMinDefaultStripeUnitBytes, kDefaultStripeUnitBytes);
}

StripeGeometry make_stripe_geometry(uint32_t members, uint32_t lba_size, uint64_t member_blocks, uint64_t unit_bytes,
                                    uint64_t set_id) {
  check_lba_size(lba_size);
  if (members < 1 || members > kMaxStripeMembers)
    throw ModelError("a striped set has 1 to " + std::to_string(kMaxStripeMembers) + " members, not " +
                     std::to_string(members));
  if (unit_bytes == 0 || unit_bytes % lba_size != 0 || unit_bytes / lba_size > UINT32_MAX)
    throw ModelError("stripe unit " + std::to_string(unit_bytes) + " bytes is not a multiple of the " +
                     std::to_string(lba_size) + "-byte LBA size (or is 0 or past 4 GiB); use e.g. --stripe-unit 1M");
  StripeGeometry g;
  g.set_id = set_id;
  g.members = members;
  g.lba_size = lba_size;
  g.unit_blocks = uint32_t(unit_bytes / lba_size);
  g.data_start_lba = std::max<uint64_t>(1, kStripeDataOffsetBytes / lba_size);
  const uint64_t avail = member_blocks > g.data_start_lba ? member_blocks - g.data_start_lba : 0;
  g.member_data_blocks = avail / g.unit_blocks * g.unit_blocks;
  if (g.member_data_blocks == 0)
    throw ModelError("the smallest member has " + std::to_string(member_blocks) + " blocks: no room for one " +
                     std::to_string(unit_bytes) + "-byte stripe unit after the 1 MiB record area; use larger members");
  return g;
}

std::vector<StripePiece> split_blocks(const StripeGeometry& g, uint64_t lba, uint64_t count) {
  if (lba > g.logical_blocks() || count > g.logical_blocks() - lba)
    throw ModelError("logical blocks " + std::to_string(lba) + "+" + std::to_string(count) + " lie past the " +
                     std::to_string(g.logical_blocks()) + " blocks of " + set_text(g));
  std::vector<StripePiece> out;
  for (uint64_t done = 0; done < count;) {
    const uint64_t L = lba + done;
    const uint64_t s = L / g.unit_blocks, within = L % g.unit_blocks;
    const uint64_t n = std::min<uint64_t>(count - done, g.unit_blocks - within);
    StripePiece p{uint32_t(s % g.members), g.data_start_lba + (s / g.members) * g.unit_blocks + within, n, done};
    if (!out.empty() && out.back().member == p.member && out.back().first_lba + out.back().lba_count == p.first_lba)
      out.back().lba_count += n;
    else
      out.push_back(p);
    done += n;
  }
  return out;
}

std::vector<std::vector<MemberExtent>> split_extent(const StripeGeometry& g, const model::Extent& logical) {
  std::vector<std::vector<MemberExtent>> out(g.members);
  const uint64_t lba = g.lba_size;
  const uint64_t data_lo = logical.byte_in_first, data_hi = logical.byte_in_first + logical.byte_length;
  for (const StripePiece& p : split_blocks(g, logical.first_lba, logical.lba_count)) {
    // The logical extent's bytes [data_lo, data_hi) that fall in this piece's blocks.
    const uint64_t lo = std::max(data_lo, p.block_offset * lba);
    const uint64_t hi = std::min(data_hi, (p.block_offset + p.lba_count) * lba);
    model::Extent e;
    e.first_lba = p.first_lba;
    e.lba_count = p.lba_count;
    e.byte_in_first = uint32_t(lo - p.block_offset * lba);
    e.byte_length = hi > lo ? hi - lo : 0;
    out[p.member].push_back({e, p.block_offset});
  }
  return out;
}

void check_stripe_members(std::span<const BlockIo> members, const StripeGeometry& g) {
  if (members.size() != g.members) throw ModelError("check_stripe_members: member count differs from the geometry");
  for (const BlockIo& m : members) {
    if (m.lba_size != g.lba_size)
      throw ModelError("the members of a striped set must share one LBA size: " + m.name + " has " +
                       std::to_string(m.lba_size) + "-byte blocks, " + members[0].name + " " +
                       std::to_string(g.lba_size) + "; format them alike");
    if (m.n_lbas != 0 && m.n_lbas < g.data_start_lba + g.member_data_blocks)
      throw ModelError(m.name + " has " + std::to_string(m.n_lbas) + " blocks, fewer than the set's " +
                       std::to_string(g.data_start_lba + g.member_data_blocks));
  }
}

void write_stripe_records(std::span<const BlockIo> members, const StripeGeometry& g, const StripeGeneration& generation) {
  check_stripe_members(members, g);
  for (uint32_t i = 0; i < g.members; ++i) {
    const std::vector<uint8_t> block = serialize_stripe_record({g, i, generation});
    members[i].write(0, 1, block.data());
  }
}

std::string describe_member(const StripeRecord& r, const std::string& device) {
  return device + " is " + member_text(r) + ", " + generation_text(r.generation);
}

bool is_stripe_member(const BlockIo& io) {
  std::vector<uint8_t> block(io.lba_size);
  io.read(0, 1, block.data());
  return has_stripe_magic(block);
}

std::vector<StripeRecord> read_member_records(std::span<const BlockIo> members) {
  if (members.empty()) throw ModelError("a striped set needs at least one member");
  std::vector<StripeRecord> recs;
  for (const BlockIo& m : members) {
    check_lba_size(m.lba_size);
    std::vector<uint8_t> block(m.lba_size);
    m.read(0, 1, block.data());
    if (!has_stripe_magic(block))
      throw ModelError(m.name + " is not a member of a striped set (no stripe record at LBA 0: " +
                       (std::memcmp(block.data(), "GPUNVMEM", 8) == 0 ? std::string("it holds a single-drive deploy")
                                                                       : std::string("nothing of ours")) +
                       "); give only the set's members, or write a set onto these devices with llm_make_model / "
                       "`gpunvme deploy` and several --device");
    recs.push_back(parse_stripe_record(block, m.name));
  }
  const StripeGeometry g = recs[0].geometry;
  const uint32_t n = uint32_t(members.size());
  for (uint32_t i = 0; i < n; ++i) {
    const StripeRecord& r = recs[i];
    if (r.geometry.set_id != g.set_id)
      throw ModelError(members[i].name + " is " + member_text(r) + ", not of " + set_text(g) + " like " +
                       members[0].name + ": the devices belong to different sets; " + order_fix(g.members));
    // Another generation first: a member saved before a re-deploy that changed the geometry (a member
    // replaced by a larger one) differs in both, and its generation is what explains it.
    if (!(r.generation == recs[0].generation)) continue;
    if (!(r.geometry == g))
      throw ModelError(members[i].name + " and " + members[0].name + " name one set but disagree on its geometry; "
                       "the records are damaged: re-create the set");
  }
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t j = 0; j < i; ++j)
      if (recs[j].member_index == recs[i].member_index)
        throw ModelError(members[i].name + " and " + members[j].name + " are both " + member_text(recs[i]) +
                         ": a member is given twice (or copied); " + order_fix(g.members));
  if (n != g.members)
    throw ModelError(std::to_string(n) + " device(s) given but " + members[0].name + " is " + member_text(recs[0]) +
                     ": " + std::to_string(g.members > n ? g.members - n : n - g.members) +
                     (g.members > n ? " member(s) missing; " : " too many; ") + order_fix(g.members));
  for (uint32_t i = 0; i < n; ++i)
    if (recs[i].member_index != i) {
      std::string order;
      for (uint32_t k = 0; k < n; ++k)
        for (uint32_t j = 0; j < n; ++j)
          if (recs[j].member_index == k) order += (k ? " " : "") + std::string("--device ") + members[j].name;
      throw ModelError(members[i].name + " is given as member " + std::to_string(i + 1) + " but is " +
                       member_text(recs[i]) + "; give the members in their order: " + order);
    }
  for (uint32_t i = 0; i < n; ++i) {
    const StripeGeometry& gi = recs[i].geometry;
    if (members[i].n_lbas != 0 && members[i].n_lbas < gi.data_start_lba + gi.member_data_blocks)
      throw ModelError(members[i].name + " has " + std::to_string(members[i].n_lbas) + " blocks but " +
                       member_text(recs[i]) + " needs " + std::to_string(gi.data_start_lba + gi.member_data_blocks) +
                       ": it was truncated or resized (an emu: image opened with a smaller size=?); re-create the set");
  }
  return recs;
}

StripeGeneration newest_generation(std::span<const StripeRecord> records) {
  StripeGeneration newest = records.empty() ? StripeGeneration{} : records[0].generation;
  for (const StripeRecord& r : records)
    if (r.generation.number > newest.number ||
        (r.generation.number == newest.number && r.generation.deploy_id > newest.deploy_id))
      newest = r.generation;
  return newest;
}

void check_one_generation(std::span<const StripeRecord> records, std::span<const BlockIo> members) {
  const StripeGeneration newest = newest_generation(records);
  const std::string set = set_text(records[0].geometry);
  const std::string fix = "the members hold stripes of different models. Re-deploy the model onto the whole set "
                          "(`gpunvme deploy` or llm_make_model with every --device, in order), or put back the copy "
                          "of each older member that was written with the others";
  auto who = [&](size_t i) { return members[i].name + " (member " + std::to_string(records[i].member_index + 1) + ")"; };
  std::string older, current;
  size_t n_older = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    if (records[i].generation.number < newest.number) {
      older += (n_older == 0 ? who(i) + " holds " : " and " + who(i) + " ") + generation_text(records[i].generation);
      ++n_older;
    } else {
      current += (current.empty() ? "" : ", ") + who(i);
    }
  }
  if (n_older > 0)
    throw ModelError(set + ": " + older + ", older than generation " + std::to_string(newest.number) + " that " + current +
                     (current.find(", ") == std::string::npos ? " holds" : " hold") + ": " +
                     (n_older == 1 ? "it was" : "they were") +
                     " saved before the set's latest deploy (a backup image, a swapped drive), or that deploy stopped "
                     "before it reached " + (n_older == 1 ? "it" : "them") + "; " + fix);
  for (size_t i = 1; i < records.size(); ++i)
    if (records[i].generation.deploy_id != records[0].generation.deploy_id)
      throw ModelError(set + ": " + who(i) + " and " + who(0) + " both hold " + generation_text(records[0].generation) +
                       ", but from two different deploys (copies of one set, each deployed on its own); " + fix);
}

StripeSet::StripeSet(std::vector<BlockIo> members) : members_(std::move(members)) {
  read_records();
  make_logical();
}

StripeSet::StripeSet(std::vector<BlockIo> members, const StripeGeometry& g, const StripeGeneration& gen)
    : members_(std::move(members)), g_(g), gen_(gen) {
  check_stripe_members(members_, g_);
  make_logical();
}

void StripeSet::read_records() {
  const std::vector<StripeRecord> recs = read_member_records(members_);
  check_one_generation(recs, members_);
  g_ = recs[0].geometry;
  gen_ = recs[0].generation;
}

void StripeSet::make_logical() {
  const uint32_t n = uint32_t(members_.size());
  logical_.lba_size = g_.lba_size;
  logical_.n_lbas = g_.logical_blocks();
  logical_.name = set_text(g_) + " over " + members_[0].name + (n > 1 ? " ..." : "");
  logical_.read = [this](uint64_t lba, uint32_t count, void* dst) {
    auto* d = static_cast<uint8_t*>(dst);
    for (const StripePiece& p : split_blocks(g_, lba, count))
      members_[p.member].read(p.first_lba, uint32_t(p.lba_count), d + p.block_offset * g_.lba_size);
  };
  logical_.write = [this](uint64_t lba, uint32_t count, const void* src) {
    const auto* s = static_cast<const uint8_t*>(src);
    for (const StripePiece& p : split_blocks(g_, lba, count))
      members_[p.member].write(p.first_lba, uint32_t(p.lba_count), s + p.block_offset * g_.lba_size);
  };
}

}  // namespace gpunvme::model
