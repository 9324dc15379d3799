#include "runtime/guard/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <utility>

#include "runtime/guard/device_footprint.h"

namespace gpunvme::guard {
namespace {

namespace fs = std::filesystem;

// /dev/stdout and its kin name a descriptor the tool inherited, not a file to create: its number.
std::optional<int> inherited_descriptor(std::string_view p) {
  if (p == "/dev/stdin") return 0;
  if (p == "/dev/stdout") return 1;
  if (p == "/dev/stderr") return 2;
  for (std::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (!p.starts_with(prefix)) continue;
    const std::string_view num = p.substr(prefix.size());
    int fd = -1;
    const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), fd);
    if (ec == std::errc() && end == num.data() + num.size() && !num.empty()) return fd;
  }
  return std::nullopt;
}

// What `path` is, for the rule: written through a temporary file and a rename (kFile), opened and
// written straight (kStream), or a descriptor the tool inherited (kDescriptor).
struct Target {
  enum Kind { kFile, kStream, kDescriptor } kind = kFile;
  int fd = -1;                // kDescriptor
  std::string file;           // kFile: the path the rename replaces (symlinks resolved)
  bool exists = false;
  struct stat st{};
};

std::string label(std::string_view flag, const std::string& path) {
  return flag.empty() ? path : std::string(flag) + " " + path;
}

[[noreturn]] void io_error(std::string_view flag, const std::string& path, const std::string& what, int err) {
  throw Error(ErrorKind::kIo, label(flag, path) + ": " + what + ": " + std::strerror(err));
}

Target resolve(const std::string& path, std::string_view flag) {
  Target t;
  if (path.empty()) throw Error(ErrorKind::kInvalidArgument, std::string(flag.empty() ? "an output" : flag) + " needs a file path");
  if (const auto fd = inherited_descriptor(path)) {
    t.kind = Target::kDescriptor;
    t.fd = *fd;
    t.exists = true;
    if (::fstat(t.fd, &t.st) != 0) io_error(flag, path, "descriptor " + std::to_string(t.fd) + " is not open", errno);
    return t;
  }
  std::error_code ec;
  if (::stat(path.c_str(), &t.st) == 0) {
    t.exists = true;
    if (S_ISDIR(t.st.st_mode))
      throw Error(ErrorKind::kInvalidArgument, label(flag, path) + ": is a directory; give the path of a file");
    if (!S_ISREG(t.st.st_mode)) {
      t.kind = Target::kStream;
      return t;
    }
    t.file = fs::canonical(path, ec).string();
    if (ec) io_error(flag, path, "cannot resolve the path", ec.value());
    return t;
  }
  if (errno != ENOENT) io_error(flag, path, "cannot write there", errno);
  t.file = fs::weakly_canonical(fs::absolute(path), ec).string();
  if (ec) io_error(flag, path, "cannot resolve the path", ec.value());
  const fs::path dir = fs::path(t.file).parent_path();
  struct stat ds{};
  if (::stat(dir.c_str(), &ds) != 0 || !S_ISDIR(ds.st_mode))
    throw Error(ErrorKind::kNotFound, label(flag, path) + ": the directory " + dir.string() +
                                          " does not exist; create it or choose another path");
  return t;
}

// The refusal for an output that does not exist yet: only an emu: image the emulator will create
// at that path can clash with it.
std::string new_file_refusal(const Target& t, const std::string& path, const std::vector<std::string>& devices,
                             std::string_view flag) {
  for (const std::string& d : devices)
    for (const std::string& p : backing_paths(d)) {
      std::error_code ec;
      const fs::path where = fs::weakly_canonical(fs::absolute(p), ec);
      if (!ec && where == t.file)
        return "refusing to write " + label(flag, path) + ": it is where this run's --device " + d +
               " creates its image; choose another path for the output";
    }
  return "";
}

std::string refusal(const Target& t, const std::string& path, const std::vector<std::string>& devices,
                    std::string_view flag, const std::string& sysfs_root) {
  if (!t.exists) return new_file_refusal(t, path, devices, flag);
  const Footprint out = footprint_of(t.st, path, sysfs_root);
  for (const std::string& d : devices)
    for (const std::string& p : backing_paths(d)) {
      const std::optional<Footprint> dev = footprint_of(p, sysfs_root);
      if (!dev) continue;
      const std::string how = shared_bytes(out, *dev);
      if (!how.empty())
        return "refusing to write " + label(flag, path) + ": it " + how + ", used by this run's --device " + d +
               ": writing it would overwrite that device's data; choose another path for the output";
    }
  if (out.block)
    return "refusing to write " + label(flag, path) + ": it is a block device" +
           (out.backing ? " (backed by " + out.backing_path + ")" : "") +
           "; an output is a file, never a disk or a partition (writing a device is --device's job, with "
           "--allow-write); choose the path of a file";
  return "";
}

// A named temporary file in `dir` for `target`: hidden, unique, created exclusively.
int create_named_temp(const std::string& dir, const std::string& target, std::string& name) {
  static unsigned counter = 0;
  const std::string base = dir + "/." + fs::path(target).filename().string() + ".tmp-" + std::to_string(::getpid()) + "-";
  for (int tries = 0; tries < 100; ++tries) {
    name = base + std::to_string(counter++);
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

}  // namespace

std::string output_refusal(const std::string& path, const std::vector<std::string>& devices_of_run,
                           std::string_view flag, const OutputOptions& options) {
  return refusal(resolve(path, flag), path, devices_of_run, flag, options.sysfs_root);
}

OutputFile OutputFile::open(const std::string& path, const std::vector<std::string>& devices_of_run,
                            std::string_view flag, const OutputOptions& options) {
  const Target t = resolve(path, flag);
  if (const std::string why = refusal(t, path, devices_of_run, flag, options.sysfs_root); !why.empty())
    throw OutputRefusedError(why);
  OutputFile o;
  o.path_ = path;
  o.flag_ = flag;
  int fd = -1;
  if (t.kind == Target::kDescriptor) {
    if ((::fcntl(t.fd, F_GETFL) & O_ACCMODE) == O_RDONLY)
      throw Error(ErrorKind::kInvalidArgument, label(flag, path) + ": descriptor " + std::to_string(t.fd) +
                                                   " is open for reading only");
    fd = ::fcntl(t.fd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0) io_error(flag, path, "cannot duplicate the descriptor", errno);
    o.shares_stdout_ = t.fd == 1;
  } else if (t.kind == Target::kStream) {
    // O_NONBLOCK: a FIFO nobody reads is an error now (ENXIO), not a wait without end; writes block again.
    fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) io_error(flag, path, errno == ENXIO ? "no process reads it" : "cannot open it", errno);
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  } else {
    o.target_ = t.file;
    o.dir_ = fs::path(t.file).parent_path().string();
    // Unnamed (O_TMPFILE) where the filesystem can, so that even a killed run leaves nothing behind;
    // linking it needs /proc/self/fd.
    if (options.unnamed_temp && ::access("/proc/self/fd", X_OK) == 0) fd = ::open(o.dir_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    o.unnamed_ = fd >= 0;
    if (fd < 0) fd = create_named_temp(o.dir_, t.file, o.temp_);
    if (fd < 0)
      io_error(flag, path, "cannot create a temporary file in " + o.dir_ +
                               " (the output is written beside its path and renamed when complete)", errno);
    if (t.exists) (void)::fchmod(fd, t.st.st_mode & 07777);  // keep the old file's mode; best effort
  }
  o.f_ = ::fdopen(fd, "w");
  if (!o.f_) {
    const int err = errno;
    ::close(fd);
    o.discard();
    io_error(flag, path, "fdopen", err);
  }
  return o;
}

OutputFile::~OutputFile() { discard(); }

OutputFile::OutputFile(OutputFile&& o) noexcept { *this = std::move(o); }

OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
  if (this == &o) return *this;
  discard();
  f_ = std::exchange(o.f_, nullptr);
  path_ = std::move(o.path_);
  flag_ = std::move(o.flag_);
  target_ = std::move(o.target_);
  dir_ = std::move(o.dir_);
  temp_ = std::exchange(o.temp_, std::string());
  unnamed_ = o.unnamed_;
  shares_stdout_ = o.shares_stdout_;
  return *this;
}

void OutputFile::discard() noexcept {
  if (f_) std::fclose(f_);
  f_ = nullptr;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

void OutputFile::fail(const std::string& step, int err) {
  discard();
  throw Error(ErrorKind::kIo, label(flag_, path_) + ": " + step + " failed" + (err ? std::string(": ") + std::strerror(err) : "") +
                                  (target_.empty() ? "" : "; " + path_ + " is as it was before the run"));
}

void OutputFile::write(const void* data, size_t n) {
  if (!f_) throw std::logic_error("OutputFile::write on an output that is not open");
  if (n && std::fwrite(data, 1, n, f_) != n) fail("writing", errno);
}

void OutputFile::flush() {
  if (!f_) throw std::logic_error("OutputFile::flush on an output that is not open");
  if (shares_stdout_) std::fflush(stdout);
  if (std::fflush(f_) != 0) fail("writing", errno);
  if (std::ferror(f_)) fail("an earlier write", 0);  // stdio keeps the error, not its cause
}

void OutputFile::commit() {
  flush();
  if (!target_.empty()) {
    if (::fsync(::fileno(f_)) != 0) fail("fsync", errno);
    if (unnamed_) {  // give the unnamed file a name beside the target, then rename it as a named one
      const std::string proc = "/proc/self/fd/" + std::to_string(::fileno(f_));
      int rc = -1;
      for (int tries = 0; tries < 100 && rc != 0; ++tries) {
        temp_ = dir_ + "/." + fs::path(target_).filename().string() + ".tmp-" + std::to_string(::getpid()) + "-l" +
                std::to_string(tries);
        rc = ::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, temp_.c_str(), AT_SYMLINK_FOLLOW);
        if (rc != 0 && errno != EEXIST) break;
      }
      if (rc != 0) {
        const int err = errno;
        temp_.clear();
        fail("naming the temporary file", err);
      }
    }
  }
  const int rc = std::fclose(std::exchange(f_, nullptr));
  if (rc != 0) fail("closing", errno);
  if (target_.empty()) return;
  if (::rename(temp_.c_str(), target_.c_str()) != 0) fail("renaming the temporary file over it", errno);
  temp_.clear();
  // The rename itself must reach the disk for the new file to survive a crash.
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const int err = dfd < 0 || ::fsync(dfd) == 0 ? 0 : errno;
  if (dfd >= 0) ::close(dfd);
  if (err != 0 && err != EINVAL)
    throw Error(ErrorKind::kIo, label(flag_, path_) + ": written, but fsync of its directory failed: " + std::strerror(err));
}

}  // namespace gpunvme::guard
