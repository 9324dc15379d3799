// What deploy refuses to overwrite without --force, in the first MiB at LBA 0 (the deploy record
// goes there) and at the start of the target range (a partition starting at 1 MiB is the common
// case): partition tables and filesystem/swap/LUKS/LVM signatures by their magic numbers, anything
// else libblkid recognises (ceph bluestore, ZFS, squashfs, f2fs, ..., as blkid and wipefs do), and
// any other non-zero byte. A GGUF file or a deploy record is not a refusal: re-deploying over a
// model is the normal use, and a device whose LBA 0 holds our record has been given to gpunvme
// before, so leftovers there are not refused again (signatures still are).
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
  bool known_format = true;  // false: non-zero bytes no prober recognises (deploy refuses them too)
};

// Signatures in `bytes`, which hold the device bytes starting at LBA `base_lba` (1 MiB sees ZFS
// labels; shorter spans check what they can): the built-in magic table, else libblkid. Empty when
// the bytes start with a GGUF or a deploy record. `lba_size` places GPT at LBA 1. `area_bytes`:
// the device bytes from base_lba on (0: unknown, taken as 1 GiB), so size-gated probers run.
std::vector<Signature> scan_signatures(std::span<const uint8_t> bytes, uint64_t base_lba, uint32_t lba_size,
                                       uint64_t area_bytes = 0);

// Reads the first MiB at LBA 0 and at `start_lba` (when the target range starts elsewhere) and
// returns every signature found, plus the first non-zero byte of a window that holds none and is
// not ours. `check_start` false: only LBA 0 and the blocks before start_lba (record-only writes).
std::vector<Signature> scan_device(const model::BlockIo& io, uint64_t start_lba, bool check_start = true);

// Before a tool replaces the file at `path` with a GGUF of its own (llm_make_model --out): what the
// file holds that is not such a file, seen as scan_device() sees a device (the file's bytes as
// 512-byte blocks) plus our own records, which a deploy may replace but a file must not: a deploy
// record (an emu: image holding a deployed model) or a stripe record (a set member) at byte 0, a
// partition table, a filesystem, other non-zero data. Empty for a path that does not exist, an
// empty file, a file that is not a regular file (guard/output_file.h rules those), or a GGUF.
std::vector<Signature> scan_file(const std::string& path);

// "ext2/3/4 filesystem at LBA 2, MBR partition table at LBA 0" for refusals; with `block_bytes`
// (a file scanned as blocks), "at byte N" instead.
std::string signature_list(const std::vector<Signature>& found, uint32_t block_bytes = 0);

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
