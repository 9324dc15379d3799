// The one exception type of the C++ API. Messages name the problem and, where there is one, the fix.
#pragma once
#include <stdexcept>
#include <string>

#include "driver/status.h"

namespace gpunvme {

enum class ErrorKind {
  kInvalidArgument,   // bad device string, option or size
  kNotFound,          // device, file, namespace missing
  kPermission,        // not root, /dev/vfio not accessible
  kResource,          // hugepages, memory, queues exhausted
  kTimeout,           // a bounded wait expired
  kControllerFatal,   // CSTS.CFS or the device disappeared
  kCommandFailed,     // a command completed with an error status
  kProtocol,          // the controller broke a protocol rule (wrong CID, bad SQ head)
  kUnsupported,       // the platform or device lacks a feature
  kIo,                // a host file or system call failed
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Error(ErrorKind kind, const std::string& what, nvme::Status status)
      : std::runtime_error(what), kind_(kind), status_(status), has_status_(true) {}
  ErrorKind kind() const { return kind_; }
  bool has_status() const { return has_status_; }
  nvme::Status status() const { return status_; }

 private:
  ErrorKind kind_;
  nvme::Status status_{};
  bool has_status_ = false;
};

}  // namespace gpunvme
