// Controller registers (BAR0) as data. NVMe Base Specification 2.0, section 3.1.4.
// Every register is its own type over the raw value; accessors carry the unit in their name.
#pragma once
#include <cstddef>
#include <cstdint>

#include "driver/compiler.h"

namespace gpunvme::nvme {

// Byte offsets of the controller properties in BAR0 (spec figure 33).
namespace reg {
inline constexpr uint32_t kCap = 0x00;
inline constexpr uint32_t kVs = 0x08;
inline constexpr uint32_t kIntms = 0x0C;
inline constexpr uint32_t kIntmc = 0x10;
inline constexpr uint32_t kCc = 0x14;
inline constexpr uint32_t kCsts = 0x1C;
inline constexpr uint32_t kNssr = 0x20;
inline constexpr uint32_t kAqa = 0x24;
inline constexpr uint32_t kAsq = 0x28;
inline constexpr uint32_t kAcq = 0x30;
inline constexpr uint32_t kCmbloc = 0x38;
inline constexpr uint32_t kCmbsz = 0x3C;
inline constexpr uint32_t kDoorbellBase = 0x1000;
}  // namespace reg

GPUNVME_HD constexpr uint64_t bits(uint64_t v, unsigned lo, unsigned width) {
  return (v >> lo) & ((width >= 64) ? ~0ull : ((1ull << width) - 1));
}
GPUNVME_HD constexpr uint64_t with_bits(uint64_t v, unsigned lo, unsigned width, uint64_t field) {
  const uint64_t mask = ((width >= 64) ? ~0ull : ((1ull << width) - 1)) << lo;
  return (v & ~mask) | ((field << lo) & mask);
}

// CAP: Controller Capabilities (64-bit, read-only).
struct Cap {
  uint64_t raw = 0;
  // MQES is 0's based: the largest queue has mqes()+1 entries.
  GPUNVME_HD constexpr uint32_t mqes() const { return uint32_t(bits(raw, 0, 16)); }
  GPUNVME_HD constexpr uint32_t max_queue_entries() const { return mqes() + 1; }
  GPUNVME_HD constexpr bool contiguous_queues_required() const { return bits(raw, 16, 1); }
  GPUNVME_HD constexpr uint32_t ams() const { return uint32_t(bits(raw, 17, 2)); }
  // CAP.TO is in units of 500 ms: the worst-case time for CSTS.RDY to follow CC.EN.
  GPUNVME_HD constexpr uint32_t to_500ms_units() const { return uint32_t(bits(raw, 24, 8)); }
  GPUNVME_HD constexpr uint32_t ready_timeout_ms() const { return to_500ms_units() * 500u; }
  // Doorbell stride is 2^(2 + DSTRD) bytes (section 3.1.4.1).
  GPUNVME_HD constexpr uint32_t dstrd() const { return uint32_t(bits(raw, 32, 4)); }
  GPUNVME_HD constexpr uint32_t doorbell_stride_bytes() const { return 4u << dstrd(); }
  GPUNVME_HD constexpr bool nssr_supported() const { return bits(raw, 36, 1); }
  GPUNVME_HD constexpr uint32_t css() const { return uint32_t(bits(raw, 37, 8)); }
  GPUNVME_HD constexpr bool nvm_command_set() const { return css() & 0x1; }
  GPUNVME_HD constexpr bool boot_partitions() const { return bits(raw, 45, 1); }
  // Memory page sizes are 2^(12 + MPS) bytes.
  GPUNVME_HD constexpr uint32_t mpsmin() const { return uint32_t(bits(raw, 48, 4)); }
  GPUNVME_HD constexpr uint32_t mpsmax() const { return uint32_t(bits(raw, 52, 4)); }
  GPUNVME_HD constexpr uint64_t min_page_bytes() const { return 1ull << (12 + mpsmin()); }
  GPUNVME_HD constexpr uint64_t max_page_bytes() const { return 1ull << (12 + mpsmax()); }
  GPUNVME_HD constexpr bool pmr_supported() const { return bits(raw, 56, 1); }
  GPUNVME_HD constexpr bool cmb_supported() const { return bits(raw, 57, 1); }

  // Builder used by the emulator.
  struct Fields {
    uint32_t mqes;
    bool cqr;
    uint32_t to_500ms;
    uint32_t dstrd;
    uint32_t css;
    uint32_t mpsmin;
    uint32_t mpsmax;
    bool cmbs;
  };
  GPUNVME_HD static constexpr Cap make(const Fields& f) {
    uint64_t v = 0;
    v = with_bits(v, 0, 16, f.mqes);
    v = with_bits(v, 16, 1, f.cqr);
    v = with_bits(v, 24, 8, f.to_500ms);
    v = with_bits(v, 32, 4, f.dstrd);
    v = with_bits(v, 37, 8, f.css);
    v = with_bits(v, 48, 4, f.mpsmin);
    v = with_bits(v, 52, 4, f.mpsmax);
    v = with_bits(v, 57, 1, f.cmbs);
    return Cap{v};
  }
};
static_assert(sizeof(Cap) == 8);

// VS: Version.
struct Vs {
  uint32_t raw = 0;
  GPUNVME_HD constexpr uint32_t major() const { return uint32_t(bits(raw, 16, 16)); }
  GPUNVME_HD constexpr uint32_t minor() const { return uint32_t(bits(raw, 8, 8)); }
  GPUNVME_HD constexpr uint32_t tertiary() const { return uint32_t(bits(raw, 0, 8)); }
  GPUNVME_HD static constexpr Vs make(uint32_t mjr, uint32_t mnr, uint32_t ter) {
    return Vs{(mjr << 16) | (mnr << 8) | ter};
  }
};
static_assert(sizeof(Vs) == 4);

// CC: Controller Configuration.
namespace cc {
inline constexpr uint32_t kCssNvm = 0;          // NVM command set
inline constexpr uint32_t kAmsRoundRobin = 0;
inline constexpr uint32_t kShnNone = 0;
inline constexpr uint32_t kShnNormal = 1;
inline constexpr uint32_t kShnAbrupt = 2;
}  // namespace cc
struct Cc {
  uint32_t raw = 0;
  GPUNVME_HD constexpr bool en() const { return bits(raw, 0, 1); }
  GPUNVME_HD constexpr uint32_t css() const { return uint32_t(bits(raw, 4, 3)); }
  GPUNVME_HD constexpr uint32_t mps() const { return uint32_t(bits(raw, 7, 4)); }
  GPUNVME_HD constexpr uint64_t page_bytes() const { return 1ull << (12 + mps()); }
  GPUNVME_HD constexpr uint32_t ams() const { return uint32_t(bits(raw, 11, 3)); }
  GPUNVME_HD constexpr uint32_t shn() const { return uint32_t(bits(raw, 14, 2)); }
  // Queue entry sizes are 2^n bytes: SQ 64 (n=6), CQ 16 (n=4).
  GPUNVME_HD constexpr uint32_t iosqes() const { return uint32_t(bits(raw, 16, 4)); }
  GPUNVME_HD constexpr uint32_t iocqes() const { return uint32_t(bits(raw, 20, 4)); }

  GPUNVME_HD constexpr Cc with_en(bool v) const { return Cc{uint32_t(with_bits(raw, 0, 1, v))}; }
  GPUNVME_HD constexpr Cc with_css(uint32_t v) const { return Cc{uint32_t(with_bits(raw, 4, 3, v))}; }
  GPUNVME_HD constexpr Cc with_mps(uint32_t v) const { return Cc{uint32_t(with_bits(raw, 7, 4, v))}; }
  GPUNVME_HD constexpr Cc with_ams(uint32_t v) const { return Cc{uint32_t(with_bits(raw, 11, 3, v))}; }
  GPUNVME_HD constexpr Cc with_shn(uint32_t v) const { return Cc{uint32_t(with_bits(raw, 14, 2, v))}; }
  GPUNVME_HD constexpr Cc with_iosqes(uint32_t v) const { return Cc{uint32_t(with_bits(raw, 16, 4, v))}; }
  GPUNVME_HD constexpr Cc with_iocqes(uint32_t v) const { return Cc{uint32_t(with_bits(raw, 20, 4, v))}; }
};
static_assert(sizeof(Cc) == 4);

// CSTS: Controller Status.
namespace csts {
inline constexpr uint32_t kShstNormal = 0;      // normal operation
inline constexpr uint32_t kShstOccurring = 1;   // shutdown processing occurring
inline constexpr uint32_t kShstComplete = 2;    // shutdown processing complete
}  // namespace csts
struct Csts {
  uint32_t raw = 0;
  GPUNVME_HD constexpr bool rdy() const { return bits(raw, 0, 1); }
  GPUNVME_HD constexpr bool cfs() const { return bits(raw, 1, 1); }  // Controller Fatal Status
  GPUNVME_HD constexpr uint32_t shst() const { return uint32_t(bits(raw, 2, 2)); }
  GPUNVME_HD constexpr bool nssro() const { return bits(raw, 4, 1); }
  GPUNVME_HD constexpr bool pp() const { return bits(raw, 5, 1); }
  // A register that reads as all ones means the device is gone (surprise removal), not a status.
  GPUNVME_HD constexpr bool device_gone() const { return raw == 0xFFFFFFFFu; }
  GPUNVME_HD constexpr Csts with_rdy(bool v) const { return Csts{uint32_t(with_bits(raw, 0, 1, v))}; }
  GPUNVME_HD constexpr Csts with_cfs(bool v) const { return Csts{uint32_t(with_bits(raw, 1, 1, v))}; }
  GPUNVME_HD constexpr Csts with_shst(uint32_t v) const { return Csts{uint32_t(with_bits(raw, 2, 2, v))}; }
};
static_assert(sizeof(Csts) == 4);

// AQA: Admin Queue Attributes; both sizes are 0's based, 12 bits each.
struct Aqa {
  uint32_t raw = 0;
  GPUNVME_HD constexpr uint32_t asqs() const { return uint32_t(bits(raw, 0, 12)); }
  GPUNVME_HD constexpr uint32_t acqs() const { return uint32_t(bits(raw, 16, 12)); }
  GPUNVME_HD constexpr uint32_t sq_entries() const { return asqs() + 1; }
  GPUNVME_HD constexpr uint32_t cq_entries() const { return acqs() + 1; }
  GPUNVME_HD static constexpr Aqa make(uint32_t sq_entries, uint32_t cq_entries) {
    return Aqa{((sq_entries - 1) & 0xFFFu) | (((cq_entries - 1) & 0xFFFu) << 16)};
  }
};
static_assert(sizeof(Aqa) == 4);
inline constexpr uint32_t kAdminQueueMaxEntries = 4096;

// CMBLOC / CMBSZ: Controller Memory Buffer location and size.
struct Cmbloc {
  uint32_t raw = 0;
  GPUNVME_HD constexpr uint32_t bir() const { return uint32_t(bits(raw, 0, 3)); }
  GPUNVME_HD constexpr uint32_t ofst() const { return uint32_t(bits(raw, 12, 20)); }
};
struct Cmbsz {
  uint32_t raw = 0;
  GPUNVME_HD constexpr bool sqs() const { return bits(raw, 0, 1); }
  GPUNVME_HD constexpr bool cqs() const { return bits(raw, 1, 1); }
  GPUNVME_HD constexpr bool lists() const { return bits(raw, 2, 1); }
  GPUNVME_HD constexpr bool rds() const { return bits(raw, 3, 1); }
  GPUNVME_HD constexpr bool wds() const { return bits(raw, 4, 1); }
  GPUNVME_HD constexpr uint32_t szu() const { return uint32_t(bits(raw, 8, 4)); }
  GPUNVME_HD constexpr uint32_t sz() const { return uint32_t(bits(raw, 12, 20)); }
  // Size unit is 4 KiB * 16^SZU.
  GPUNVME_HD constexpr uint64_t size_bytes() const { return uint64_t(sz()) * (4096ull << (4 * szu())); }
};
static_assert(sizeof(Cmbloc) == 4 && sizeof(Cmbsz) == 4);

// The register file as it sits at the start of BAR0; offsets asserted against the spec.
struct RegisterFile {
  Cap cap;          // 0x00
  Vs vs;            // 0x08
  uint32_t intms;   // 0x0C
  uint32_t intmc;   // 0x10
  Cc cc;            // 0x14
  uint32_t rsvd18;  // 0x18
  Csts csts;        // 0x1C
  uint32_t nssr;    // 0x20
  Aqa aqa;          // 0x24
  uint64_t asq;     // 0x28
  uint64_t acq;     // 0x30
  Cmbloc cmbloc;    // 0x38
  Cmbsz cmbsz;      // 0x3C
};
static_assert(offsetof(RegisterFile, cap) == reg::kCap);
static_assert(offsetof(RegisterFile, vs) == reg::kVs);
static_assert(offsetof(RegisterFile, intms) == reg::kIntms);
static_assert(offsetof(RegisterFile, intmc) == reg::kIntmc);
static_assert(offsetof(RegisterFile, cc) == reg::kCc);
static_assert(offsetof(RegisterFile, csts) == reg::kCsts);
static_assert(offsetof(RegisterFile, nssr) == reg::kNssr);
static_assert(offsetof(RegisterFile, aqa) == reg::kAqa);
static_assert(offsetof(RegisterFile, asq) == reg::kAsq);
static_assert(offsetof(RegisterFile, acq) == reg::kAcq);
static_assert(offsetof(RegisterFile, cmbloc) == reg::kCmbloc);
static_assert(offsetof(RegisterFile, cmbsz) == reg::kCmbsz);
static_assert(sizeof(RegisterFile) == 0x40);

// Doorbells (section 3.1.4.22/23): SQ y tail at 0x1000 + (2y) * stride, CQ y head at
// 0x1000 + (2y + 1) * stride, with stride = 4 << CAP.DSTRD bytes. Queue 0 is the admin queue.
GPUNVME_HD constexpr uint64_t sq_tail_doorbell_offset(uint32_t qid, uint32_t dstrd) {
  return reg::kDoorbellBase + uint64_t(2 * qid) * (4u << dstrd);
}
GPUNVME_HD constexpr uint64_t cq_head_doorbell_offset(uint32_t qid, uint32_t dstrd) {
  return reg::kDoorbellBase + uint64_t(2 * qid + 1) * (4u << dstrd);
}
// Smallest BAR0 that holds the doorbells of queues 0..max_qid.
GPUNVME_HD constexpr uint64_t bar0_bytes_for(uint32_t max_qid, uint32_t dstrd) {
  return cq_head_doorbell_offset(max_qid, dstrd) + 4;
}
static_assert(sq_tail_doorbell_offset(0, 0) == 0x1000);
static_assert(cq_head_doorbell_offset(0, 0) == 0x1004);
static_assert(sq_tail_doorbell_offset(1, 0) == 0x1008);
static_assert(cq_head_doorbell_offset(1, 2) == 0x1000 + 3 * 16);

}  // namespace gpunvme::nvme
