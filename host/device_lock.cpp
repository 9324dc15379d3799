#include "host/device_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <vector>

#include "host/emulator/config.h"
#include "host/vfio/vfio_transport.h"

namespace gpunvme::host {
namespace {

// pids of the processes holding a flock on the file open at `fd`, from /proc/locks lines such as
// "3: FLOCK  ADVISORY  WRITE 4242 00:2d:131077 0 EOF" (device major:minor in hex, inode decimal).
std::vector<std::string> lock_holders(int fd) {
  struct stat st{};
  std::vector<std::string> out;
  if (::fstat(fd, &st) != 0) return out;
  char id[64];
  std::snprintf(id, sizeof id, "%02x:%02x:%llu", major(st.st_dev), minor(st.st_dev), (unsigned long long)st.st_ino);
  std::ifstream locks("/proc/locks");
  std::string line;
  while (std::getline(locks, line)) {
    std::istringstream f(line);
    std::string num, kind, advisory, rw, pid, file;
    if (!(f >> num >> kind) || kind == "->") continue;  // "->" lines are waiters, not holders
    if (!(f >> advisory >> rw >> pid >> file) || kind != "FLOCK" || file != id) continue;
    std::string holder = pid + (rw == "WRITE" ? " (writing)" : " (reading)");
    if (std::find(out.begin(), out.end(), holder) == out.end()) out.push_back(std::move(holder));
  }
  return out;
}

bool held_by_this_process_only(int fd) {
  const auto h = lock_holders(fd);
  const std::string me = std::to_string(::getpid()) + " ";
  return !h.empty() && std::all_of(h.begin(), h.end(), [&](const std::string& x) { return x.rfind(me, 0) == 0; });
}

std::string holders_text(int fd) {
  const auto h = lock_holders(fd);
  if (h.empty()) return "another process holds";
  std::string t = h.size() == 1 ? "pid " : "pids ";
  for (size_t i = 0; i < h.size(); ++i) t += (i ? ", " : "") + h[i];
  return t + (h.size() == 1 ? " holds" : " hold");
}

// The file to lock for `device`, or "" when the device needs no lock. `create`: the lock file of
// a vfio: device is ours to create; an emu: image is not (the emulator creates it).
std::string lock_path(std::string_view device, uint32_t nsid, bool& create) {
  create = false;
  if (vfio::is_vfio_device_string(device)) {
    create = true;
    const std::string bdf(device.substr(5));
    if (::mkdir("/run/gpunvme", 0755) == 0 || errno == EEXIST) {
      if (::access("/run/gpunvme", W_OK) == 0) return "/run/gpunvme/vfio-" + bdf + ".lock";
    }
    return "/tmp/gpunvme-vfio-" + bdf + ".lock";
  }
  if (!emu::is_emu_device(device)) return "";
  std::string first(device.substr(4, device.find(',') == std::string_view::npos ? std::string_view::npos
                                                                                 : device.find(',') - 4));
  if (first == "ram" || first == "null") return "";
  const auto cfg = emu::parse_emu_device(device);
  if (nsid == 0 || nsid > cfg.namespaces.size()) return "";  // the controller reports the missing namespace
  return cfg.namespaces[nsid - 1].path;
}

}  // namespace

DeviceLock::~DeviceLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

DeviceLock& DeviceLock::operator=(DeviceLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    what_ = std::move(o.what_);
    o.fd_ = -1;
  }
  return *this;
}

std::string DeviceLock::key(std::string_view device, uint32_t nsid) {
  bool create = false;
  const std::string path = lock_path(device, nsid, create);
  if (path.empty()) return "";
  std::error_code ec;  // weakly: an image the emulator has not created yet has a key too
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(path, ec);
  return ec ? path : canonical.string();
}

std::vector<size_t> lock_order(const std::vector<std::string>& devices, uint32_t nsid) {
  std::vector<std::string> keys;
  for (const std::string& d : devices) keys.push_back(DeviceLock::key(d, nsid));
  std::vector<size_t> order(devices.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  for (size_t i = 1; i < order.size(); ++i) {
    const size_t a = std::min(order[i - 1], order[i]), b = std::max(order[i - 1], order[i]);
    if (!keys[a].empty() && keys[a] == keys[b])
      throw Error(ErrorKind::kInvalidArgument, devices[a] + " and " + devices[b] + " are one namespace (" + keys[a] +
                                                   "), given twice; give each device once");
  }
  return order;
}

DeviceLock DeviceLock::acquire(std::string_view device, uint32_t nsid, LockMode mode) {
  bool create = false;
  const std::string path = lock_path(device, nsid, create);
  DeviceLock lock;
  if (path.empty()) return lock;
  lock.fd_ = ::open(path.c_str(), (create ? O_RDWR | O_CREAT : O_RDONLY) | O_CLOEXEC | O_NOCTTY, 0644);
  if (lock.fd_ < 0) {
    if (errno == ENOENT && !create) return lock;
    throw Error(ErrorKind::kIo, "cannot open " + path + " to lock " + std::string(device) + ": " + std::strerror(errno));
  }
  lock.what_ = path;
  const int op = (mode == LockMode::kExclusive ? LOCK_EX : LOCK_SH) | LOCK_NB;
  while (::flock(lock.fd_, op) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) throw Error(ErrorKind::kIo, "flock " + path + ": " + std::strerror(errno));
    if (held_by_this_process_only(lock.fd_))  // not "busy, pid <our own>": the same device opened twice
      throw DeviceBusyError(std::string(device) + " is open already in this process (" + path +
                            "): a device given twice, under one spelling or another? Give each device once");
    throw DeviceBusyError(std::string(device) + " is in use: " + holders_text(lock.fd_) + " " + path +
                          (mode == LockMode::kExclusive
                               ? "; writing needs the device to itself (a deploy, or a tool that writes: demo, "
                                 "nvme_perf writes or --fill, layer_stream, an example)"
                               : "; it is being written (a deploy is running, or a tool that writes)") +
                          ". Wait for that process to finish (or stop it), then try again");
  }
  if (create && mode == LockMode::kExclusive) {  // the writer's pid, for people looking at the lock file
    const std::string note = std::to_string(::getpid()) + "\n";
    if (::ftruncate(lock.fd_, 0) == 0 && ::pwrite(lock.fd_, note.data(), note.size(), 0) < 0) {
      // The note is only for people; the flock is what counts.
    }
  }
  return lock;
}

}  // namespace gpunvme::host
