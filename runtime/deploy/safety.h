// What deploy refuses to overwrite without --force: partition tables and filesystem (or swap,
// LUKS, LVM) signatures at the start of the device (the deploy record goes to LBA 0) and at the
// start of the target range (a partition starting at 1 MiB is the common case). A GGUF file or an
// earlier deploy record is not a refusal: re-deploying over a model is the normal use.
#pragma once
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/model/block_io.h"

namespace gpunvme::deploy {

struct Signature {
  uint64_t lba;      // first LBA of the structure found (the LBA deploy would overwrite)
  std::string what;  // "MBR partition table with 2 partitions", "ext2/3/4 filesystem", ...
};

// Signatures in `bytes`, which hold the device bytes starting at LBA `base_lba` (at least 68 KiB
// are needed to see btrfs; shorter spans check what they can). `lba_size` places GPT at LBA 1.
std::vector<Signature> scan_signatures(std::span<const uint8_t> bytes, uint64_t base_lba, uint32_t lba_size);

// Reads the first 68 KiB at LBA 0 and at `start_lba` (when the target range starts elsewhere)
// and returns every signature found. `check_start` false: only LBA 0 (record-only writes).
std::vector<Signature> scan_device(const model::BlockIo& io, uint64_t start_lba, bool check_start = true);

// Thrown when deploy refuses to write; the message names what was found, where, and --force.
class RefusedError : public std::runtime_error {
 public:
  RefusedError(const std::string& what, std::vector<Signature> found = {})
      : std::runtime_error(what), found_(std::move(found)) {}
  const std::vector<Signature>& found() const { return found_; }

 private:
  std::vector<Signature> found_;
};

}  // namespace gpunvme::deploy
