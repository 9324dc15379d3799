// Namespace backings: a raw image file (pread/pwrite), anonymous RAM, null (no data at all), or bytes
// generated on read (emu:gen, generated.h: read-only).
// An image file is created (and extended to size=) only when opened for writing; a file this
// object created is removed again when opening fails. NamespaceConfig::read_only opens O_RDONLY
// and changes nothing: a file shorter than size= reads as zeros past its end, writes fail.
// One concrete class with a switch on the backing, so the I/O path pays no virtual call.
#pragma once
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "host/emulator/config.h"
#include "host/emulator/generated.h"

namespace gpunvme::emu {

class Namespace {
 public:
  // Opens or creates the backing; throws gpunvme::Error naming the file and the failing call.
  explicit Namespace(const NamespaceConfig& cfg);
  ~Namespace();
  Namespace(const Namespace&) = delete;
  Namespace& operator=(const Namespace&) = delete;

  Backing backing() const { return backing_; }
  bool is_null() const { return backing_ == Backing::kNull; }
  uint64_t blocks() const { return blocks_; }
  uint32_t lba_bytes() const { return lba_bytes_; }
  uint32_t lba_shift() const { return lba_shift_; }
  const std::string& path() const { return path_; }

  // Data movement between the medium at byte offset `off` and host segments. false: the medium
  // failed (the caller reports a media error); the range was validated by the caller.
  bool read(uint64_t off, const iovec* iov, int n);
  bool write(uint64_t off, const iovec* iov, int n);
  bool write_zeroes(uint64_t off, uint64_t len);
  bool flush();
  bool read_only() const { return read_only_; }
  // Writes are refused with Namespace Is Write Protected, not attempted (emu:gen: nothing to write to).
  bool write_protected() const { return backing_ == Backing::kGenerated; }
  // Volatile Write Cache disabled: every write reaches stable storage before it completes.
  void set_write_through(bool on) { write_through_.store(on, std::memory_order_relaxed); }

 private:
  uint64_t open_file(const NamespaceConfig& cfg);  // returns the namespace bytes

  Backing backing_;
  std::string path_;
  uint64_t blocks_ = 0;
  uint32_t lba_bytes_ = 512;
  uint32_t lba_shift_ = 9;
  int fd_ = -1;
  bool read_only_ = false;
  uint64_t file_bytes_ = 0;  // reads past this (a file shorter than its namespace) return zeros
  char* ram_ = nullptr;
  uint64_t ram_bytes_ = 0;
  std::atomic<bool> write_through_{false};
  std::shared_ptr<const GeneratedBytes> generated_;  // kGenerated
};

}  // namespace gpunvme::emu
