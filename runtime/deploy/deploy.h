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
#include "runtime/gguf/byte_source.h"
#include "runtime/model/deploy_record.h"

namespace gpunvme::deploy {

struct DeployOptions {
  std::optional<uint64_t> start_lba;     // default: default_start_lba() (1 MiB in; 4 KiB on a striped set)
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

// Parses the GGUF header first (gguf::GgufError for a file that is not a valid GGUF, ModelError
// for a path that is not a regular file), then check_target(); then writes. With record_only,
// also refuses when the device's first model block differs from the file's (the dd step was not
// done, or done elsewhere).
//
// The write is atomic for readers (detect.h): a striped set laid anew over members that held
// something else first has their LBA 0 zeroed (Device::retire_previous_layout, flushed), so that no
// old set or model opens on bytes the new layout moves; an in-progress record goes to LBA 0 and the
// start block is zeroed (both flushed) before any model byte; a new striped set's member records
// (Device::write_layout) follow them, flushed, so the set never opens on an older model's bytes;
// the model's first block (its GGUF magic) is written only after all the others, then a flush,
// then the final record, then a flush. A deploy that stops anywhere (signal, error, power) leaves
// the in-progress record, which ls, verify and the runtime refuse (or, for a set stopped before its
// records, members that do not open as one set). A failed write throws ModelError saying how far
// it got.
DeployResult deploy_model(Device& dev, const std::string& gguf_path, const DeployOptions& opt = {});
// The same write from bytes made on the fly (a generated model, examples/llm/tools/make_model.cpp):
// `model` holds a whole GGUF (checked: header, tensors inside it); read in pieces of
// opt.piece_bytes, each once, in order. No record_only (there is no file to dd).
DeployResult deploy_source(Device& dev, gguf::ByteSource& model, const std::string& name, const DeployOptions& opt = {});

// What deploy (and --print-dd, which must refuse the same targets) checks before writing
// `model_bytes` at `start_lba`: start LBA >= 1, a device that keeps data (not emu:null), fit
// (check_fit), and scan_device() (record_only: LBA 0 only). Throws RefusedError; with force,
// returns the signatures that would be written over.
std::vector<Signature> check_target(Device& dev, uint64_t model_bytes, uint64_t start_lba, bool record_only, bool force);

// Throws RefusedError "model is 241.38 MiB but namespace 1 has 128.00 MiB from LBA 2048 (...); use a
// larger device or a smaller --start-lba" (`space` and `fix` as given) when [start_lba, start_lba +
// ceil(bytes/lba)) does not fit in n_lbas blocks.
void check_fit(uint64_t model_bytes, const std::string& space, uint32_t lba_size, uint64_t n_lbas, uint64_t start_lba,
               const std::string& fix);

// Where a deploy puts the model unless told: 1 MiB in (model::default_model_start_lba) on one
// namespace, right after the record on a striped set's logical volume (model::kStripedModelStartBytes).
uint64_t default_start_lba(const Device& dev);

// The dd command that puts the file where deploy would: the largest bs (power of two, <= 1 MiB,
// >= lba_size) that divides the start byte offset, seek in units of bs. The file and target are
// shell-quoted (shell_quote.h): the command is meant to be pasted into a shell.
struct DdPlan {
  uint64_t bs = 0;
  uint64_t seek = 0;
  std::string command;  // dd if=MODEL of=TARGET bs=.. seek=.. oflag=direct conv=fsync status=progress
};
DdPlan dd_plan(const std::string& gguf_path, uint32_t lba_size, uint64_t start_lba,
               const std::string& target = "/dev/nvmeXnY");

}  // namespace gpunvme::deploy
