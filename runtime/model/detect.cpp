#include "runtime/model/detect.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/model/model_error.h"
#include "runtime/model/stripe.h"

namespace gpunvme::model {
namespace {

bool gguf_magic_at(const BlockIo& io, uint64_t lba, std::vector<uint8_t>& buf) {
  if (io.n_lbas != 0 && lba >= io.n_lbas) return false;
  io.read(lba, 1, buf.data());
  return std::memcmp(buf.data(), "GGUF", 4) == 0;
}

DetectedModel raw_at(const BlockIo& io, uint64_t lba) {
  DetectedModel m;
  m.kind = DetectedModel::Kind::kRawGguf;
  m.start_lba = lba;
  m.byte_bound = io.n_lbas != 0 ? (io.n_lbas - lba) * io.lba_size : UINT64_MAX;
  return m;
}

std::string unfinished_message(const BlockIo& io, const DeployRecord& r) {
  return "the deploy of '" + r.name + "' (" + std::to_string(r.model_bytes) + " bytes at LBA " +
         std::to_string(r.model_start_lba) + ") to " + io.name +
         " did not finish: it was interrupted or failed, or is still running, so the model bytes there are "
         "incomplete. Re-run `gpunvme deploy MODEL.gguf --device ...` (it replaces the unfinished one)";
}

// A record written for another block size than the device is opened with (its CRC fails over this
// device's block) is not damage: it says which block size to open the device with.
void refuse_other_block_size(const BlockIo& io, std::vector<uint8_t>& block) {
  const uint64_t want = std::max<uint64_t>(kMaxRecordBlock / io.lba_size, 1);
  std::vector<uint8_t> bytes(std::min(want, io.n_lbas != 0 ? io.n_lbas : want) * io.lba_size);
  io.read(kRecordLba, bytes.size() / io.lba_size, bytes.data());
  const uint32_t written = intact_record_block_size(bytes);
  if (written == 0 || written == io.lba_size) return;
  const std::string sizes = std::to_string(written) + "-byte blocks, and " + io.name + " is opened with " +
                            std::to_string(io.lba_size) + "-byte blocks";
  if (io.name.rfind("emu:", 0) == 0)
    throw ModelError("this image was written with " + sizes + ": " +
                     (written == 512 ? std::string("drop lba=") + std::to_string(io.lba_size) +
                                           " from the device string (512 is the default)"
                                     : "add lba=" + std::to_string(written) + " to the device string"));
  throw ModelError("the deploy record at LBA 0 was written for " + sizes +
                   ": the namespace was reformatted since the deploy; deploy the model again");
}

// A record at LBA 0: refused when unfinished, inconsistent with the device or with the hint.
DetectedModel record_model(const BlockIo& io, std::vector<uint8_t>& block, std::optional<uint64_t> hint) {
  DetectedModel m;
  m.kind = DetectedModel::Kind::kRecord;
  m.record = parse_record(block, kRecordLba);
  if (m.record->in_progress) throw UnfinishedDeployError(unfinished_message(io, *m.record));
  m.start_lba = m.record->model_start_lba;
  m.byte_bound = m.record->model_bytes;
  if (hint && *hint != m.start_lba) {
    throw ModelError("the given start LBA " + std::to_string(*hint) + " does not match the deploy record on " + io.name +
                     ", which puts the model at LBA " + std::to_string(m.start_lba) +
                     "; drop the start LBA (the record says where the model is)");
  }
  if (io.n_lbas != 0 && m.record->model_end_lba() > io.n_lbas) {
    throw ModelError("the deploy record on " + io.name + " says the model ends at LBA " +
                     std::to_string(m.record->model_end_lba()) + " but the namespace has " + std::to_string(io.n_lbas) +
                     " blocks; it was resized or the record is stale");
  }
  if (!gguf_magic_at(io, m.start_lba, block)) {
    throw ModelError("the deploy record on " + io.name + " points to LBA " + std::to_string(m.start_lba) +
                     " but there is no GGUF magic there; the model was overwritten, re-deploy it");
  }
  return m;
}

// The record and the header it points to must describe one model: the name deploy took from
// general.name, and a length that ends where the header's data ends (up to the alignment padding).
// A mismatch means two writers mixed (or dd wrote over a deployed model): listing one model's
// name and size with the other's extents would be a lie.
void check_record_matches_header(const BlockIo& io, const DeployRecord& r, const gguf::GgufFile& f) {
  const std::string header_name = f.model_name();
  const uint64_t slack = std::max<uint64_t>(f.alignment(), io.lba_size);
  std::string why;
  if (!header_name.empty() && header_name.rfind(r.name, 0) != 0) {
    why = "the record names '" + r.name + "' but the GGUF header there says '" + header_name + "'";
  } else if (f.data_end() > r.model_bytes) {
    why = "the GGUF header's tensors end at byte " + std::to_string(f.data_end()) + ", past the " +
          std::to_string(r.model_bytes) + " bytes the record holds";
  } else if (r.model_bytes - f.data_end() > slack) {
    why = "the record holds " + std::to_string(r.model_bytes) + " bytes but the GGUF header's tensors end at byte " +
          std::to_string(f.data_end());
  }
  if (why.empty()) return;
  throw ModelError("the deploy record on " + io.name + " does not match the model at LBA " +
                          std::to_string(r.model_start_lba) + ": " + why +
                          " (two writers at once, or a model written over by dd); re-deploy the model");
}

}  // namespace

std::string DetectedModel::describe() const {
  switch (kind) {
    case Kind::kNone: return "no model found";
    case Kind::kRecord:
      return "model '" + record->name + "' (" + std::to_string(record->model_bytes) + " bytes) at LBA " +
             std::to_string(start_lba) + ", deploy record at LBA " + std::to_string(record->record_lba);
    case Kind::kRawGguf: return "GGUF without deploy record at LBA " + std::to_string(start_lba);
  }
  return "?";
}

DetectedModel detect_model(const BlockIo& io, std::optional<uint64_t> start_lba_hint) {
  check_lba_size(io.lba_size);
  if (!io.read) throw ModelError("detect_model: the BlockIo has no read callback");
  std::vector<uint8_t> block(io.lba_size);
  io.read(kRecordLba, 1, block.data());
  if (has_record_magic(block)) {
    refuse_other_block_size(io, block);
    return record_model(io, block, start_lba_hint);
  }
  if (has_stripe_magic(block)) {
    const StripeRecord r = parse_stripe_record(block, io.name);
    throw ModelError(describe_member(r, io.name) + ": one member alone holds 1 of every " + std::to_string(r.geometry.members) +
                     " stripe units of the model; give all " + std::to_string(r.geometry.members) +
                     " members, in order (--device M1 --device M2 ...)");
  }
  const bool raw_at_0 = std::memcmp(block.data(), "GGUF", 4) == 0;
  const uint64_t dflt = default_model_start_lba(io.lba_size);
  if (start_lba_hint) {
    if (*start_lba_hint == 0 ? raw_at_0 : gguf_magic_at(io, *start_lba_hint, block)) return raw_at(io, *start_lba_hint);
    std::string instead;
    if (raw_at_0) {
      instead = "; there is one at LBA 0 (drop the start LBA to use it)";
    } else if (*start_lba_hint != dflt && gguf_magic_at(io, dflt, block)) {
      instead = "; there is one at the 1 MiB default LBA " + std::to_string(dflt) + " (drop the start LBA to use it)";
    }
    throw ModelError("no model at the given start LBA " + std::to_string(*start_lba_hint) + " on " + io.name +
                     ": no deploy record at LBA 0 and no GGUF magic at LBA " + std::to_string(*start_lba_hint) +
                     (instead.empty() ? "; pass the LBA where the model was written" : instead));
  }
  if (raw_at_0) return raw_at(io, 0);
  if (gguf_magic_at(io, dflt, block)) return raw_at(io, dflt);
  return {};
}

gguf::GgufFile read_model_header(const BlockIo& io, const DetectedModel& m) {
  if (m.kind == DetectedModel::Kind::kNone) {
    throw ModelError("no model on " + io.name + ": no deploy record at LBA 0 and no GGUF magic at LBA 0, " +
                     "the given start LBA or the 1 MiB default; deploy one or pass its start LBA");
  }
  DeviceByteSource src(io, m.start_lba, m.byte_bound);
  return read_model_header(io, m, src);
}

gguf::GgufFile read_model_header(const BlockIo& io, const DetectedModel& m, gguf::ByteSource& src) {
  gguf::GgufFile f = gguf::GgufFile::read(src);
  if (m.record) check_record_matches_header(io, *m.record, f);
  return f;
}

}  // namespace gpunvme::model
