// `gpunvme verify`: finds the model on the device (model/detect.h), re-reads every byte through
// the driver and checks each chunk's CRC-32C against the deploy record, and/or against a host file
// (--against). A model written by dd without a record is checked for a parsing GGUF header whose
// tensors all lie on the device (and, with --against, byte for byte through per-chunk CRCs).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/deploy/device.h"
#include "runtime/deploy/progress.h"
#include "runtime/model/detect.h"

namespace gpunvme::deploy {

struct ChunkCheck {
  uint64_t index = 0;
  uint64_t byte_offset = 0;  // into the model
  uint64_t bytes = 0;
  uint64_t first_lba = 0;    // LBA range on the device, end exclusive
  uint64_t end_lba = 0;
  uint32_t actual = 0;                  // CRC-32C of the bytes read back
  std::optional<uint32_t> expected;     // from the deploy record
  std::optional<uint32_t> file;         // from --against
  bool ok() const { return (!expected || *expected == actual) && (!file || *file == actual); }
};

struct VerifyOptions {
  std::optional<uint64_t> start_lba;  // where to look for a model written by dd without a record
  std::string against;                // host GGUF file to compare with ("" = none)
  ProgressFn progress;                // (bytes read back, total)
};

struct VerifyReport {
  model::DetectedModel detected;
  std::string model_name;
  uint64_t model_bytes = 0;        // bytes checked: the record's length, the file's, or the header's data end
  uint64_t n_tensors = 0;
  uint32_t chunk_shift = 0;
  std::vector<ChunkCheck> chunks;
  std::vector<std::string> problems;  // header, tensor bounds, length mismatches
  double seconds = 0;

  uint64_t failed_chunks() const;
  bool checked_bytes() const;  // false: nothing to compare the bytes with (no record, no --against)
  bool ok() const { return problems.empty() && failed_chunks() == 0; }
};

// Throws model::ModelError when there is no model on the device at all.
VerifyReport verify_device(Device& dev, const VerifyOptions& opt = {});

}  // namespace gpunvme::deploy
