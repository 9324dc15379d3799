#include "runtime/model/detect.h"

#include <cstring>
#include <vector>

#include "runtime/model/model_error.h"

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
    DetectedModel m;
    m.kind = DetectedModel::Kind::kRecord;
    m.record = parse_record(block, kRecordLba);
    m.start_lba = m.record->model_start_lba;
    m.byte_bound = m.record->model_bytes;
    if (io.n_lbas != 0 && m.record->model_end_lba() > io.n_lbas) {
      throw ModelError("the deploy record on " + io.name + " says the model ends at LBA " +
                       std::to_string(m.record->model_end_lba()) + " but the namespace has " +
                       std::to_string(io.n_lbas) + " blocks; it was resized or the record is stale");
    }
    if (!gguf_magic_at(io, m.start_lba, block)) {
      throw ModelError("the deploy record on " + io.name + " points to LBA " + std::to_string(m.start_lba) +
                       " but there is no GGUF magic there; the model was overwritten, re-deploy it");
    }
    return m;
  }
  if (std::memcmp(block.data(), "GGUF", 4) == 0) return raw_at(io, 0);
  if (start_lba_hint && gguf_magic_at(io, *start_lba_hint, block)) return raw_at(io, *start_lba_hint);
  uint64_t dflt = default_model_start_lba(io.lba_size);
  if (gguf_magic_at(io, dflt, block)) return raw_at(io, dflt);
  return {};
}

gguf::GgufFile read_model_header(const BlockIo& io, const DetectedModel& m) {
  if (m.kind == DetectedModel::Kind::kNone) {
    throw ModelError("no model on " + io.name + ": no deploy record at LBA 0 and no GGUF magic at LBA 0, " +
                     "the given start LBA or the 1 MiB default; deploy one or pass its start LBA");
  }
  DeviceByteSource src(io, m.start_lba, m.byte_bound);
  return gguf::GgufFile::read(src);
}

}  // namespace gpunvme::model
