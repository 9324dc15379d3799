// Completion status: the CQE status half-word decoded, and every status code as readable text.
// NVMe Base 2.0 section 4.6.1 (figures 92-99), NVM Command Set 1.0 section 3.4.
#pragma once
#include <cstdint>
#include <string>

#include "driver/compiler.h"

namespace gpunvme::nvme {

// Status Code Type values.
namespace sct {
inline constexpr uint8_t kGeneric = 0x0;
inline constexpr uint8_t kCommandSpecific = 0x1;
inline constexpr uint8_t kMediaError = 0x2;
inline constexpr uint8_t kPathRelated = 0x3;
inline constexpr uint8_t kVendorSpecific = 0x7;
}  // namespace sct

// Generic command status (SCT 0).
namespace sc {
inline constexpr uint8_t kSuccess = 0x00;
inline constexpr uint8_t kInvalidOpcode = 0x01;
inline constexpr uint8_t kInvalidField = 0x02;
inline constexpr uint8_t kCommandIdConflict = 0x03;
inline constexpr uint8_t kDataTransferError = 0x04;
inline constexpr uint8_t kAbortedPowerLoss = 0x05;
inline constexpr uint8_t kInternalError = 0x06;
inline constexpr uint8_t kAbortRequested = 0x07;
inline constexpr uint8_t kAbortedSqDeletion = 0x08;
inline constexpr uint8_t kInvalidNamespaceOrFormat = 0x0B;
inline constexpr uint8_t kCommandSequenceError = 0x0C;
inline constexpr uint8_t kPrpOffsetInvalid = 0x13;
inline constexpr uint8_t kNamespaceWriteProtected = 0x20;
inline constexpr uint8_t kLbaOutOfRange = 0x80;
inline constexpr uint8_t kCapacityExceeded = 0x81;
inline constexpr uint8_t kNamespaceNotReady = 0x82;
// Command specific status (SCT 1).
inline constexpr uint8_t kCompletionQueueInvalid = 0x00;
inline constexpr uint8_t kInvalidQueueIdentifier = 0x01;
inline constexpr uint8_t kInvalidQueueSize = 0x02;
inline constexpr uint8_t kAsyncEventLimitExceeded = 0x05;
inline constexpr uint8_t kInvalidInterruptVector = 0x08;
inline constexpr uint8_t kInvalidLogPage = 0x09;
inline constexpr uint8_t kInvalidQueueDeletion = 0x0C;
inline constexpr uint8_t kFeatureNotSaveable = 0x0D;
inline constexpr uint8_t kFeatureNotChangeable = 0x0E;
// Media and data integrity errors (SCT 2).
inline constexpr uint8_t kWriteFault = 0x80;
inline constexpr uint8_t kUnrecoveredReadError = 0x81;
}  // namespace sc

// The 15 status bits of a CQE (bits 15:1 of the status half-word), without the phase tag.
struct Status {
  uint16_t field = 0;  // CQE status >> 1

  GPUNVME_HD static constexpr Status from_cqe_status(uint16_t cqe_status) { return Status{uint16_t(cqe_status >> 1)}; }
  GPUNVME_HD static constexpr Status make(uint8_t type, uint8_t code, bool dnr = false) {
    return Status{uint16_t(code | (uint16_t(type & 0x7) << 8) | (dnr ? (1u << 14) : 0u))};
  }
  GPUNVME_HD constexpr uint8_t code() const { return uint8_t(field & 0xFF); }
  GPUNVME_HD constexpr uint8_t type() const { return uint8_t((field >> 8) & 0x7); }
  GPUNVME_HD constexpr uint8_t crd() const { return uint8_t((field >> 11) & 0x3); }
  GPUNVME_HD constexpr bool more() const { return (field >> 13) & 1; }
  GPUNVME_HD constexpr bool dnr() const { return (field >> 14) & 1; }  // Do Not Retry
  GPUNVME_HD constexpr bool ok() const { return type() == sct::kGeneric && code() == sc::kSuccess; }
  // The CQE status half-word with the given phase tag.
  GPUNVME_HD constexpr uint16_t to_cqe_status(uint32_t phase) const { return uint16_t((field << 1) | (phase & 1)); }
  GPUNVME_HD constexpr bool operator==(const Status& o) const { return field == o.field; }
};

// Name of a status code type, e.g. "Generic Command Status".
const char* status_type_name(uint8_t type);
// Text of one status code, e.g. "Invalid Field in Command"; "Reserved/unknown status code" if unknown.
const char* status_code_name(uint8_t type, uint8_t code);
// Full description: "LBA Out of Range (SCT 0x0 Generic Command Status, SC 0x80, DNR)".
std::string describe(Status s);

}  // namespace gpunvme::nvme
