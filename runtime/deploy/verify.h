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
  // The device failed to read the chunk: its first failed read (LBA range, NVMe status). Nothing is
  // known of its bytes then, and a re-deploy cannot fix what the device cannot read.
  std::string read_error;
  bool unreadable() const { return !read_error.empty(); }
  bool crc_mismatch() const { return !unreadable() && ((expected && *expected != actual) || (file && *file != actual)); }
  bool ok() const { return !unreadable() && !crc_mismatch(); }
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
  std::vector<std::string> read_errors;  // reads the device failed outside the chunks (the header)
  double seconds = 0;

  uint64_t failed_chunks() const;      // chunks read whose CRC differs: a re-deploy repairs them
  uint64_t unreadable_chunks() const;  // chunks the device failed to read
  bool checked_bytes() const;  // false: nothing to compare the bytes with (no record, no --against)
  bool device_failed() const { return !read_errors.empty() || unreadable_chunks() != 0; }
  bool ok() const { return problems.empty() && failed_chunks() == 0 && !device_failed(); }
};

// A failure of the device to read (an error status, no completion, a dead controller): not a
// verdict on the bytes, which it never delivered.
bool is_read_failure(const std::exception& e);

// Throws model::ModelError when there is no model on the device at all.
VerifyReport verify_device(Device& dev, const VerifyOptions& opt = {});

}  // namespace gpunvme::deploy
