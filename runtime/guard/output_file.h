// The one rule for every file a tool writes besides its device (llm --trace, --logits-out and
// --json-out, gpunvme read --out, the benchmarks' --json-out, dequant_dump's files; the Python tools
// mirror it in scripts/output_file.py):
//   - Refused when the path is, or resolves to, a device of the run (the --device strings the tool was
//     given, every member of a striped set): the same inode as an emu: image (by another path, a hard
//     link or a symlink), the same block device, a partition of it or the disk holding it, a loop
//     device backed by it or by the same file (device_footprint.h), or where an emu: image not yet
//     created will be. The message names the output, the device and the fix (another path).
//   - A block device is always refused, a device of the run or not: an output flag means a file, and
//     writing a disk is what --device and --allow-write are for (write_guard.h).
//   - A regular file, existing or new, is written to a temporary file beside it (same directory,
//     unnamed where the filesystem can: O_TMPFILE) and renamed over it only at commit(), after every
//     write, the flush, fsync and close succeeded. A failed, interrupted or killed run leaves the old
//     file (or none); a symlink to a file keeps the link and replaces the file it names; the file's
//     mode is kept. A directory that does not exist is an error, as is one the tool cannot create
//     files in (even where the file itself is writable).
//   - A character device or a pipe (/dev/null, /dev/full, a FIFO) and /dev/stdout, /dev/stderr,
//     /dev/fd/N, /proc/self/fd/N (the descriptor the tool inherited) cannot be renamed over: they are
//     written straight, every write checked (/dev/full: "No space left on device", exit != 0).
//   - A failure is a gpunvme::Error naming the flag, the path and the step; the tool exits != 0.
#pragma once
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "host/error.h"

namespace gpunvme::guard {

// The output would overwrite a device (of the run, or any block device).
class OutputRefusedError : public Error {
 public:
  explicit OutputRefusedError(const std::string& what) : Error(ErrorKind::kInvalidArgument, what) {}
};

// How open() works, for tests: sysfs is read under `sysfs_root` (a fake tree), and `unnamed_temp`
// false takes the path used where the filesystem has no O_TMPFILE (a hidden named file, removed on
// failure).
struct OutputOptions {
  std::string sysfs_root = "/sys";
  bool unnamed_temp = true;
};

// Why writing `path` is refused under the rule above ("" when it is not): the check open() makes
// first, alone. `flag` names the option in the message ("--trace").
std::string output_refusal(const std::string& path, const std::vector<std::string>& devices_of_run,
                           std::string_view flag = "", const OutputOptions& options = {});

class OutputFile {
 public:
  OutputFile() = default;  // no output (its flag was not given): false, and nothing to write
  ~OutputFile();           // uncommitted: the temporary file goes, the old file stays as it was
  OutputFile(OutputFile&& o) noexcept;
  OutputFile& operator=(OutputFile&& o) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Checks `path` against `devices_of_run` (throws OutputRefusedError) and opens what the rule says
  // (throws Error naming the cause otherwise). `flag` is the option, for messages ("--json-out").
  static OutputFile open(const std::string& path, const std::vector<std::string>& devices_of_run,
                         std::string_view flag = "", const OutputOptions& options = {});

  explicit operator bool() const { return f_ != nullptr; }
  const std::string& path() const { return path_; }

  // stdio stream for fprintf and friends; its errors are kept by stdio and reported by flush() or
  // commit(), so a fprintf whose result is ignored still cannot fail silently.
  std::FILE* stream() const { return f_; }
  void write(const void* data, size_t n);  // throws when stdio takes fewer bytes
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Hands stdio's buffer to the file (or the pipe) now; throws on a failed write.
  void flush();
  // Flush, fsync, close, then the rename over path (regular files); throws on any failure, leaving
  // the old file as it was. After it the object is empty (false).
  void commit();

 private:
  [[noreturn]] void fail(const std::string& step, int err);
  void discard() noexcept;

  std::FILE* f_ = nullptr;
  std::string path_;    // as given, for messages
  std::string flag_;    // the option, for messages
  std::string target_;  // regular files: what the rename replaces (symlinks resolved); "" when written straight
  std::string dir_;     // the directory of target_
  std::string temp_;    // a named temporary file (no O_TMPFILE, or linked at commit), to remove on failure
  bool unnamed_ = false;  // target_'s content is in an O_TMPFILE file, linked at commit
  bool shares_stdout_ = false;  // /dev/stdout: the tool's own stdout text is flushed first, to keep the order
};

}  // namespace gpunvme::guard
