// Finds a model on a device from the device alone:
//   1. a deploy record at LBA 0 (deploy_record.h) -> its start LBA and exact byte length;
//   2. else GGUF magic at LBA 0 (plain `dd if=model.gguf of=/dev/nvme0n1`);
//   3. else GGUF magic at the 1 MiB default (`dd ... bs=1M seek=1` without a record).
// With a start LBA hint, the model must be there: a record that says otherwise, or no GGUF magic
// at the hint, is an error naming the hint (and where a model was found instead), never a
// silent fallback to another place.
// A record that is present but damaged is an error, not a fallback: silently reading the wrong
// bytes as a model would be worse. An in-progress record (a deploy that was interrupted, failed or
// is still running) throws UnfinishedDeployError (model_error.h): the bytes are incomplete.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/block_io.h"
#include "runtime/model/deploy_record.h"

namespace gpunvme::model {

struct DetectedModel {
  enum class Kind { kNone, kRecord, kRawGguf };
  Kind kind = Kind::kNone;
  uint64_t start_lba = 0;
  // Exact byte length when a record exists; for raw GGUF, the bytes from start_lba to the end of
  // the device (an upper bound the header parser checks tensors against).
  uint64_t byte_bound = 0;
  std::optional<DeployRecord> record;
  std::string describe() const;
};

DetectedModel detect_model(const BlockIo& io, std::optional<uint64_t> start_lba_hint = std::nullopt);

// Parses the GGUF header of a detected model through the block callbacks (throws ModelError when
// nothing was detected, GgufError for a bad header). With a record, also checks that the record
// and the header describe one model (the name deploy took from general.name, a length ending
// where the tensor data ends): ModelError otherwise (two writers mixed, or dd over a deployed model).
gguf::GgufFile read_model_header(const BlockIo& io, const DetectedModel& m);
// The same from `src`, the model's bytes as some reader serves them (checked_header.h: each chunk
// checked against the record before the parser sees it).
gguf::GgufFile read_model_header(const BlockIo& io, const DetectedModel& m, gguf::ByteSource& src);

}  // namespace gpunvme::model
