// `gpunvme deploy`: writes a GGUF file onto a namespace through our own driver and adds the
// self-describing deploy record (runtime/model/deploy_record.h: record at LBA 0, model from the
// 1 MiB default or --start-lba on, CRC-32C per chunk). Also the `dd` route: the exact dd command,
// and --record-only, which checksums the file and writes just the record after dd.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/deploy/device.h"
#include "runtime/deploy/progress.h"
#include "runtime/deploy/safety.h"
#include "runtime/model/deploy_record.h"

namespace gpunvme::deploy {

struct DeployOptions {
  std::optional<uint64_t> start_lba;     // default: model::default_model_start_lba() (1 MiB in)
  bool force = false;                    // write over partition tables / filesystem signatures
  bool record_only = false;              // the model is already there (dd): checksum the file, write the record
  uint64_t piece_bytes = 8u << 20;       // bytes per pipelined write (file read overlaps the previous write)
  ProgressFn progress;                   // (bytes written, total)
};

struct DeployResult {
  model::DeployRecord record;           // as written to LBA 0
  uint64_t bytes_written = 0;           // model bytes written (0 with record_only)
  double seconds = 0;                   // wall time of the model write (incl. record and flush)
  std::vector<Signature> overridden;    // what --force wrote over
};

// Parses the GGUF header first (gguf::GgufError for a file that is not a valid GGUF), then
// refuses (RefusedError) a start LBA of 0, a model that does not fit, and, without force, any
// signature scan_device() finds; then writes. With record_only, also refuses when the device's
// first model block differs from the file's (the dd step was not done, or done elsewhere).
DeployResult deploy_model(Device& dev, const std::string& gguf_path, const DeployOptions& opt = {});

// Throws RefusedError "model is 241.38 MiB but namespace 1 has 128.00 MiB from LBA 2048; use a
// larger device or a smaller --start-lba" when [start_lba, start_lba + ceil(bytes/lba)) does not fit.
void check_fit(uint64_t model_bytes, uint32_t nsid, uint32_t lba_size, uint64_t n_lbas, uint64_t start_lba);

// The dd command that puts the file where deploy would: the largest bs (power of two, <= 1 MiB,
// >= lba_size) that divides the start byte offset, seek in units of bs.
struct DdPlan {
  uint64_t bs = 0;
  uint64_t seek = 0;
  std::string command;  // dd if=MODEL of=TARGET bs=.. seek=.. oflag=direct conv=fsync status=progress
};
DdPlan dd_plan(const std::string& gguf_path, uint32_t lba_size, uint64_t start_lba,
               const std::string& target = "/dev/nvmeXnY");

}  // namespace gpunvme::deploy
