// Advisory locks that keep gpunvme processes from writing one device at the same time, or reading
// it while it is written: every writer takes an exclusive lock, every reader a shared one, and
// neither waits (a busy device is refused at once, naming the holder's pid). Tools take it by
// opening the device through host/locked_open.h (deploy/verify/ls through runtime/deploy/device.h,
// demo, nvme_perf, layer_stream, the examples, `gpunvme read`; the engine's DeviceSet takes it
// itself), and whatever locks several namespaces (a striped set's members) takes them in lock_order().
//   emu:PATH   flock(2) on the namespace's backing file itself: nothing is created or left behind.
//   vfio:BDF   flock(2) on /run/gpunvme/vfio-BDF.lock (/tmp/gpunvme-vfio-BDF.lock where /run is not
//              writable), which also holds the holder's pid as a note for people.
//   emu:ram, emu:null   live inside one process: no lock.
// The holder's pid comes from /proc/locks (the kernel's list of held locks), so a note that
// outlives its process can never block anyone: the lock dies with the process, even on SIGKILL.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "host/error.h"

namespace gpunvme::host {

enum class LockMode { kShared, kExclusive };

// The device is locked by another process (or another open of it in this one).
class DeviceBusyError : public Error {
 public:
  explicit DeviceBusyError(const std::string& what) : Error(ErrorKind::kResource, what) {}
};

class DeviceLock {
 public:
  DeviceLock() = default;  // holds nothing
  ~DeviceLock();
  DeviceLock(DeviceLock&& o) noexcept : fd_(o.fd_), what_(std::move(o.what_)) { o.fd_ = -1; }
  DeviceLock& operator=(DeviceLock&& o) noexcept;
  DeviceLock(const DeviceLock&) = delete;
  DeviceLock& operator=(const DeviceLock&) = delete;

  // Locks namespace `nsid` of `device` (a device string) without waiting. Throws DeviceBusyError
  // naming the holders' pids when it is taken (a writer conflicts with anyone, a reader with a
  // writer). Returns a lock that holds nothing for devices that need none and for an emu: image
  // file that does not exist yet: call again once the emulator has created it.
  static DeviceLock acquire(std::string_view device, uint32_t nsid, LockMode mode);

  // What identifies namespace `nsid` of `device` for locking, across processes and spellings: the
  // canonical path of the file its lock is taken on ("emu:/tmp/./a.img" and "emu:/tmp/a.img,size=1G"
  // have one key), "" for a device that needs no lock.
  static std::string key(std::string_view device, uint32_t nsid);

  bool held() const { return fd_ >= 0; }
  const std::string& what() const { return what_; }  // the locked file

 private:
  int fd_ = -1;
  std::string what_;
};

// The order in which to lock (and open) several namespaces held together, a striped set's members:
// indices into `devices`, ascending by key() (devices that need no lock first, as given). Whatever
// order its members are given in, every process then asks for one set's locks in one order, so of
// two processes opening one set at once the first to lock its first member gets them all and the
// other is refused at once, never each holding some and refused the rest. Throws gpunvme::Error
// (kInvalidArgument) naming both strings when two of them are one namespace.
std::vector<size_t> lock_order(const std::vector<std::string>& devices, uint32_t nsid);

}  // namespace gpunvme::host
