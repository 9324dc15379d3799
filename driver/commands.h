// Submission and completion queue entries, opcodes and command encoders.
// NVMe Base Specification 2.0 sections 4.2 (SQE), 4.6 (CQE), 5 (admin), NVM Command Set 1.0 section 3.
#pragma once
#include <cstddef>
#include <cstdint>

#include "driver/compiler.h"

namespace gpunvme::nvme {

inline constexpr uint32_t kSqeBytes = 64;
inline constexpr uint32_t kCqeBytes = 16;
inline constexpr uint32_t kIoSqesLog2 = 6;  // CC.IOSQES
inline constexpr uint32_t kIoCqesLog2 = 4;  // CC.IOCQES

namespace admin_op {
inline constexpr uint8_t kDeleteIoSq = 0x00;
inline constexpr uint8_t kCreateIoSq = 0x01;
inline constexpr uint8_t kGetLogPage = 0x02;
inline constexpr uint8_t kDeleteIoCq = 0x04;
inline constexpr uint8_t kCreateIoCq = 0x05;
inline constexpr uint8_t kIdentify = 0x06;
inline constexpr uint8_t kAbort = 0x08;
inline constexpr uint8_t kSetFeatures = 0x09;
inline constexpr uint8_t kGetFeatures = 0x0A;
inline constexpr uint8_t kAsyncEventRequest = 0x0C;
}  // namespace admin_op

namespace nvm_op {
inline constexpr uint8_t kFlush = 0x00;
inline constexpr uint8_t kWrite = 0x01;
inline constexpr uint8_t kRead = 0x02;
inline constexpr uint8_t kWriteZeroes = 0x08;
inline constexpr uint8_t kDatasetManagement = 0x09;
}  // namespace nvm_op

// Identify CNS values (section 5.17).
namespace cns {
inline constexpr uint8_t kNamespace = 0x00;
inline constexpr uint8_t kController = 0x01;
inline constexpr uint8_t kActiveNamespaceList = 0x02;
}  // namespace cns

// Feature identifiers (section 5.27.1).
namespace feature {
inline constexpr uint8_t kArbitration = 0x01;
inline constexpr uint8_t kPowerManagement = 0x02;
inline constexpr uint8_t kTemperatureThreshold = 0x04;
inline constexpr uint8_t kVolatileWriteCache = 0x06;
inline constexpr uint8_t kNumberOfQueues = 0x07;
inline constexpr uint8_t kInterruptCoalescing = 0x08;
}  // namespace feature

// Log page identifiers (section 5.16.1).
namespace log_page {
inline constexpr uint8_t kErrorInformation = 0x01;
inline constexpr uint8_t kSmartHealth = 0x02;
inline constexpr uint8_t kFirmwareSlot = 0x03;
}  // namespace log_page

// 64-byte submission queue entry (figure 88 / 89).
struct SubmissionEntry {
  uint8_t opcode;
  uint8_t flags;  // FUSE bits 1:0, PSDT bits 7:6 (0 = PRPs)
  uint16_t cid;   // command identifier, unique among commands in flight on this SQ
  uint32_t nsid;
  uint32_t cdw2;
  uint32_t cdw3;
  uint64_t mptr;
  uint64_t prp1;  // DPTR.PRP1
  uint64_t prp2;  // DPTR.PRP2
  uint32_t cdw10;
  uint32_t cdw11;
  uint32_t cdw12;
  uint32_t cdw13;
  uint32_t cdw14;
  uint32_t cdw15;

  GPUNVME_HD constexpr uint32_t psdt() const { return (flags >> 6) & 0x3u; }
  GPUNVME_HD constexpr uint32_t fuse() const { return flags & 0x3u; }
};
static_assert(sizeof(SubmissionEntry) == kSqeBytes);
static_assert(offsetof(SubmissionEntry, opcode) == 0);
static_assert(offsetof(SubmissionEntry, flags) == 1);
static_assert(offsetof(SubmissionEntry, cid) == 2);
static_assert(offsetof(SubmissionEntry, nsid) == 4);
static_assert(offsetof(SubmissionEntry, cdw2) == 8);
static_assert(offsetof(SubmissionEntry, cdw3) == 12);
static_assert(offsetof(SubmissionEntry, mptr) == 16);
static_assert(offsetof(SubmissionEntry, prp1) == 24);
static_assert(offsetof(SubmissionEntry, prp2) == 32);
static_assert(offsetof(SubmissionEntry, cdw10) == 40);
static_assert(offsetof(SubmissionEntry, cdw11) == 44);
static_assert(offsetof(SubmissionEntry, cdw12) == 48);
static_assert(offsetof(SubmissionEntry, cdw13) == 52);
static_assert(offsetof(SubmissionEntry, cdw14) == 56);
static_assert(offsetof(SubmissionEntry, cdw15) == 60);

// 16-byte completion queue entry (figure 90). The status half-word holds the phase tag in bit 0.
struct CompletionEntry {
  uint32_t dw0;  // command specific
  uint32_t dw1;
  uint16_t sqhd;  // SQ head pointer: entries up to here are consumed by the controller
  uint16_t sqid;
  uint16_t cid;
  uint16_t status;  // P (bit 0), SC (8:1), SCT (11:9), CRD (13:12), M (14), DNR (15)

  GPUNVME_HD constexpr uint32_t phase() const { return status & 1u; }
};
static_assert(sizeof(CompletionEntry) == kCqeBytes);
static_assert(offsetof(CompletionEntry, dw0) == 0);
static_assert(offsetof(CompletionEntry, dw1) == 4);
static_assert(offsetof(CompletionEntry, sqhd) == 8);
static_assert(offsetof(CompletionEntry, sqid) == 10);
static_assert(offsetof(CompletionEntry, cid) == 12);
static_assert(offsetof(CompletionEntry, status) == 14);

// ---- Encoders: one place that knows where each command keeps its fields. ----

GPUNVME_HD constexpr SubmissionEntry make_identify(uint8_t cns_value, uint32_t nsid, uint64_t prp1, uint64_t prp2) {
  SubmissionEntry e{};
  e.opcode = admin_op::kIdentify;
  e.nsid = nsid;
  e.prp1 = prp1;
  e.prp2 = prp2;
  e.cdw10 = cns_value;
  return e;
}

// Create I/O Completion Queue: physically contiguous, interrupts disabled (we poll).
GPUNVME_HD constexpr SubmissionEntry make_create_io_cq(uint16_t qid, uint32_t entries, uint64_t base) {
  SubmissionEntry e{};
  e.opcode = admin_op::kCreateIoCq;
  e.prp1 = base;
  e.cdw10 = ((entries - 1) << 16) | qid;
  e.cdw11 = 0x1;  // PC=1, IEN=0, IV=0
  return e;
}

GPUNVME_HD constexpr SubmissionEntry make_create_io_sq(uint16_t qid, uint32_t entries, uint64_t base, uint16_t cqid) {
  SubmissionEntry e{};
  e.opcode = admin_op::kCreateIoSq;
  e.prp1 = base;
  e.cdw10 = ((entries - 1) << 16) | qid;
  e.cdw11 = (uint32_t(cqid) << 16) | 0x1;  // PC=1, QPRIO=0 (urgent/ignored under round robin)
  return e;
}

GPUNVME_HD constexpr SubmissionEntry make_delete_io_sq(uint16_t qid) {
  SubmissionEntry e{};
  e.opcode = admin_op::kDeleteIoSq;
  e.cdw10 = qid;
  return e;
}

GPUNVME_HD constexpr SubmissionEntry make_delete_io_cq(uint16_t qid) {
  SubmissionEntry e{};
  e.opcode = admin_op::kDeleteIoCq;
  e.cdw10 = qid;
  return e;
}

// Number of Queues: both counts are 0's based; the grant comes back in CQE DW0 (NSQA 15:0, NCQA 31:16).
GPUNVME_HD constexpr SubmissionEntry make_set_num_queues(uint16_t nsq, uint16_t ncq) {
  SubmissionEntry e{};
  e.opcode = admin_op::kSetFeatures;
  e.cdw10 = feature::kNumberOfQueues;
  e.cdw11 = (uint32_t(ncq - 1) << 16) | uint32_t(nsq - 1);
  return e;
}
struct QueueGrant {
  uint32_t sq_count;
  uint32_t cq_count;
};
GPUNVME_HD constexpr QueueGrant decode_num_queues(uint32_t dw0) {
  return QueueGrant{(dw0 & 0xFFFFu) + 1, (dw0 >> 16) + 1};
}

GPUNVME_HD constexpr SubmissionEntry make_get_features(uint8_t fid, uint32_t nsid = 0) {
  SubmissionEntry e{};
  e.opcode = admin_op::kGetFeatures;
  e.nsid = nsid;
  e.cdw10 = fid;
  return e;
}

// Get Log Page: NUMD is a 0's based dword count split across CDW10 (15:0 -> 31:16) and CDW11.
GPUNVME_HD constexpr SubmissionEntry make_get_log_page(uint8_t lid, uint32_t nsid, uint32_t bytes, uint64_t prp1,
                                                       uint64_t prp2) {
  SubmissionEntry e{};
  e.opcode = admin_op::kGetLogPage;
  e.nsid = nsid;
  e.prp1 = prp1;
  e.prp2 = prp2;
  const uint32_t numd = bytes / 4 - 1;
  e.cdw10 = ((numd & 0xFFFFu) << 16) | lid;
  e.cdw11 = numd >> 16;
  return e;
}

// Abort (section 5.1): the command `cid` of SQ `sqid`. Best effort: the controller may complete the
// command normally instead; when it does abort it, that command completes with Command Abort Requested.
GPUNVME_HD constexpr SubmissionEntry make_abort(uint16_t sqid, uint16_t cid) {
  SubmissionEntry e{};
  e.opcode = admin_op::kAbort;
  e.cdw10 = (uint32_t(cid) << 16) | sqid;
  return e;
}
// The Abort completion's DW0 bit 0: 0 = the command was aborted, 1 = it was not (not found, or done).
GPUNVME_HD constexpr bool abort_took_effect(uint32_t dw0) { return (dw0 & 1u) == 0; }

// Read / Write: SLBA in CDW10/11, NLB (0's based, 16 bits) in CDW12.
GPUNVME_HD constexpr SubmissionEntry make_rw(uint8_t opcode, uint32_t nsid, uint64_t slba, uint32_t nblocks,
                                             uint64_t prp1, uint64_t prp2) {
  SubmissionEntry e{};
  e.opcode = opcode;
  e.nsid = nsid;
  e.prp1 = prp1;
  e.prp2 = prp2;
  e.cdw10 = uint32_t(slba);
  e.cdw11 = uint32_t(slba >> 32);
  e.cdw12 = (nblocks - 1) & 0xFFFFu;
  return e;
}
GPUNVME_HD constexpr SubmissionEntry make_read(uint32_t nsid, uint64_t slba, uint32_t nblocks, uint64_t prp1,
                                               uint64_t prp2) {
  return make_rw(nvm_op::kRead, nsid, slba, nblocks, prp1, prp2);
}
GPUNVME_HD constexpr SubmissionEntry make_write(uint32_t nsid, uint64_t slba, uint32_t nblocks, uint64_t prp1,
                                                uint64_t prp2) {
  return make_rw(nvm_op::kWrite, nsid, slba, nblocks, prp1, prp2);
}
GPUNVME_HD constexpr SubmissionEntry make_flush(uint32_t nsid) {
  SubmissionEntry e{};
  e.opcode = nvm_op::kFlush;
  e.nsid = nsid;
  return e;
}
GPUNVME_HD constexpr uint64_t rw_slba(const SubmissionEntry& e) { return (uint64_t(e.cdw11) << 32) | e.cdw10; }
GPUNVME_HD constexpr uint32_t rw_nblocks(const SubmissionEntry& e) { return (e.cdw12 & 0xFFFFu) + 1; }
inline constexpr uint32_t kMaxBlocksPerCommand = 65536;  // NLB is a 16-bit 0's based count

}  // namespace gpunvme::nvme
