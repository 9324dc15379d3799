#include "driver/status.h"

#include <cstdio>

namespace gpunvme::nvme {
namespace {

struct CodeName {
  uint8_t code;
  const char* name;
};

// Figure 95 (generic) plus NVM Command Set figure 29 (0x80..0x84).
constexpr CodeName kGeneric[] = {
    {0x00, "Successful Completion"},
    {0x01, "Invalid Command Opcode"},
    {0x02, "Invalid Field in Command"},
    {0x03, "Command ID Conflict"},
    {0x04, "Data Transfer Error"},
    {0x05, "Commands Aborted due to Power Loss Notification"},
    {0x06, "Internal Error"},
    {0x07, "Command Abort Requested"},
    {0x08, "Command Aborted due to SQ Deletion"},
    {0x09, "Command Aborted due to Failed Fused Command"},
    {0x0A, "Command Aborted due to Missing Fused Command"},
    {0x0B, "Invalid Namespace or Format"},
    {0x0C, "Command Sequence Error"},
    {0x0D, "Invalid SGL Segment Descriptor"},
    {0x0E, "Invalid Number of SGL Descriptors"},
    {0x0F, "Data SGL Length Invalid"},
    {0x10, "Metadata SGL Length Invalid"},
    {0x11, "SGL Descriptor Type Invalid"},
    {0x12, "Invalid Use of Controller Memory Buffer"},
    {0x13, "PRP Offset Invalid"},
    {0x14, "Atomic Write Unit Exceeded"},
    {0x15, "Operation Denied"},
    {0x16, "SGL Offset Invalid"},
    {0x18, "Host Identifier Inconsistent Format"},
    {0x19, "Keep Alive Timer Expired"},
    {0x1A, "Keep Alive Timeout Invalid"},
    {0x1B, "Command Aborted due to Preempt and Abort"},
    {0x1C, "Sanitize Failed"},
    {0x1D, "Sanitize In Progress"},
    {0x1E, "SGL Data Block Granularity Invalid"},
    {0x1F, "Command Not Supported for Queue in CMB"},
    {0x20, "Namespace is Write Protected"},
    {0x21, "Command Interrupted"},
    {0x22, "Transient Transport Error"},
    {0x80, "LBA Out of Range"},
    {0x81, "Capacity Exceeded"},
    {0x82, "Namespace Not Ready"},
    {0x83, "Reservation Conflict"},
    {0x84, "Format In Progress"},
};

// Figure 96 (command specific) plus NVM Command Set figure 30.
constexpr CodeName kCommandSpecific[] = {
    {0x00, "Completion Queue Invalid"},
    {0x01, "Invalid Queue Identifier"},
    {0x02, "Invalid Queue Size"},
    {0x03, "Abort Command Limit Exceeded"},
    {0x05, "Asynchronous Event Request Limit Exceeded"},
    {0x06, "Invalid Firmware Slot"},
    {0x07, "Invalid Firmware Image"},
    {0x08, "Invalid Interrupt Vector"},
    {0x09, "Invalid Log Page"},
    {0x0A, "Invalid Format"},
    {0x0B, "Firmware Activation Requires Conventional Reset"},
    {0x0C, "Invalid Queue Deletion"},
    {0x0D, "Feature Identifier Not Saveable"},
    {0x0E, "Feature Not Changeable"},
    {0x0F, "Feature Not Namespace Specific"},
    {0x10, "Firmware Activation Requires NVM Subsystem Reset"},
    {0x11, "Firmware Activation Requires Controller Level Reset"},
    {0x12, "Firmware Activation Requires Maximum Time Violation"},
    {0x13, "Firmware Activation Prohibited"},
    {0x14, "Overlapping Range"},
    {0x15, "Namespace Insufficient Capacity"},
    {0x16, "Namespace Identifier Unavailable"},
    {0x18, "Namespace Already Attached"},
    {0x19, "Namespace Is Private"},
    {0x1A, "Namespace Not Attached"},
    {0x1B, "Thin Provisioning Not Supported"},
    {0x1C, "Controller List Invalid"},
    {0x80, "Conflicting Attributes"},
    {0x81, "Invalid Protection Information"},
    {0x82, "Attempted Write to Read Only Range"},
};

// Figure 97 plus NVM Command Set figure 31.
constexpr CodeName kMedia[] = {
    {0x80, "Write Fault"},
    {0x81, "Unrecovered Read Error"},
    {0x82, "End-to-end Guard Check Error"},
    {0x83, "End-to-end Application Tag Check Error"},
    {0x84, "End-to-end Reference Tag Check Error"},
    {0x85, "Compare Failure"},
    {0x86, "Access Denied"},
    {0x87, "Deallocated or Unwritten Logical Block"},
};

// Figure 98.
constexpr CodeName kPath[] = {
    {0x00, "Internal Path Error"},
    {0x01, "Asymmetric Access Persistent Loss"},
    {0x02, "Asymmetric Access Inaccessible"},
    {0x03, "Asymmetric Access Transition"},
    {0x60, "Controller Pathing Error"},
    {0x70, "Host Pathing Error"},
    {0x71, "Command Aborted By Host"},
};

template <size_t N>
const char* lookup(const CodeName (&table)[N], uint8_t code) {
  for (const auto& e : table)
    if (e.code == code) return e.name;
  return nullptr;
}

}  // namespace

const char* status_type_name(uint8_t type) {
  switch (type) {
    case sct::kGeneric: return "Generic Command Status";
    case sct::kCommandSpecific: return "Command Specific Status";
    case sct::kMediaError: return "Media and Data Integrity Errors";
    case sct::kPathRelated: return "Path Related Status";
    case sct::kVendorSpecific: return "Vendor Specific";
    default: return "Reserved Status Code Type";
  }
}

const char* status_code_name(uint8_t type, uint8_t code) {
  const char* name = nullptr;
  switch (type) {
    case sct::kGeneric: name = lookup(kGeneric, code); break;
    case sct::kCommandSpecific: name = lookup(kCommandSpecific, code); break;
    case sct::kMediaError: name = lookup(kMedia, code); break;
    case sct::kPathRelated: name = lookup(kPath, code); break;
    case sct::kVendorSpecific: name = "Vendor Specific Status"; break;
    default: break;
  }
  return name ? name : "Reserved/unknown status code";
}

std::string describe(Status s) {
  char buf[192];
  std::snprintf(buf, sizeof buf, "%s (SCT 0x%x %s, SC 0x%02x%s%s)", status_code_name(s.type(), s.code()), s.type(),
                status_type_name(s.type()), s.code(), s.dnr() ? ", DNR" : "", s.more() ? ", More" : "");
  return buf;
}

}  // namespace gpunvme::nvme
