// Identify Controller and Identify Namespace data structures (NVMe Base 2.0 figures 275 and 280),
// limited to the fields gpunvme reads or the emulator fills, with every offset asserted.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gpunvme::nvme {

inline constexpr uint32_t kIdentifyBytes = 4096;

struct PowerStateDescriptor {
  uint8_t bytes[32];
};

struct IdentifyController {
  uint16_t vid;            // 0: PCI vendor id
  uint16_t ssvid;          // 2
  char sn[20];             // 4: serial number, ASCII, space padded
  char mn[40];             // 24: model number
  char fr[8];              // 64: firmware revision
  uint8_t rab;             // 72
  uint8_t ieee[3];         // 73
  uint8_t cmic;            // 76
  uint8_t mdts;            // 77: max transfer = 2^MDTS * CAP.MPSMIN page; 0 = no limit
  uint16_t cntlid;         // 78
  uint32_t ver;            // 80
  uint8_t rsvd84[256 - 84];
  uint16_t oacs;           // 256
  uint8_t acl;             // 258
  uint8_t aerl;            // 259
  uint8_t frmw;            // 260
  uint8_t lpa;             // 261
  uint8_t elpe;            // 262
  uint8_t npss;            // 263
  uint8_t rsvd264[512 - 264];
  uint8_t sqes;            // 512: required (3:0) and maximum (7:4) SQ entry size, log2
  uint8_t cqes;            // 513
  uint16_t maxcmd;         // 514
  uint32_t nn;             // 516: number of namespaces (highest valid NSID)
  uint16_t oncs;           // 520: optional NVM command support
  uint16_t fuses;          // 522
  uint8_t fna;             // 524
  uint8_t vwc;             // 525: volatile write cache present
  uint16_t awun;           // 526
  uint16_t awupf;          // 528
  uint8_t rsvd530[536 - 530];
  uint32_t sgls;           // 536
  uint8_t rsvd540[768 - 540];
  char subnqn[256];        // 768
  uint8_t rsvd1024[2048 - 1024];
  PowerStateDescriptor psd[32];  // 2048
  uint8_t vendor[1024];    // 3072
};
static_assert(sizeof(IdentifyController) == kIdentifyBytes);
static_assert(offsetof(IdentifyController, sn) == 4);
static_assert(offsetof(IdentifyController, mn) == 24);
static_assert(offsetof(IdentifyController, fr) == 64);
static_assert(offsetof(IdentifyController, mdts) == 77);
static_assert(offsetof(IdentifyController, cntlid) == 78);
static_assert(offsetof(IdentifyController, ver) == 80);
static_assert(offsetof(IdentifyController, oacs) == 256);
static_assert(offsetof(IdentifyController, sqes) == 512);
static_assert(offsetof(IdentifyController, cqes) == 513);
static_assert(offsetof(IdentifyController, nn) == 516);
static_assert(offsetof(IdentifyController, oncs) == 520);
static_assert(offsetof(IdentifyController, vwc) == 525);
static_assert(offsetof(IdentifyController, sgls) == 536);
static_assert(offsetof(IdentifyController, subnqn) == 768);
static_assert(offsetof(IdentifyController, psd) == 2048);
static_assert(offsetof(IdentifyController, vendor) == 3072);

// ONCS bits (figure 275).
namespace oncs {
inline constexpr uint16_t kCompare = 1u << 0;
inline constexpr uint16_t kWriteUncorrectable = 1u << 1;
inline constexpr uint16_t kDatasetManagement = 1u << 2;
inline constexpr uint16_t kWriteZeroes = 1u << 3;
}  // namespace oncs

// LBA Format descriptor: metadata size, LBA data size as log2, relative performance.
struct LbaFormat {
  uint32_t raw;
  constexpr uint32_t ms() const { return raw & 0xFFFFu; }
  constexpr uint32_t lbads() const { return (raw >> 16) & 0xFFu; }
  constexpr uint32_t rp() const { return (raw >> 24) & 0x3u; }
  constexpr uint64_t data_bytes() const { return lbads() >= 9 ? (1ull << lbads()) : 0; }
  static constexpr LbaFormat make(uint32_t lbads_log2, uint32_t ms_bytes = 0, uint32_t rp_value = 0) {
    return LbaFormat{(ms_bytes & 0xFFFFu) | (lbads_log2 << 16) | (rp_value << 24)};
  }
};
static_assert(sizeof(LbaFormat) == 4);

struct IdentifyNamespace {
  uint64_t nsze;           // 0: size in logical blocks
  uint64_t ncap;           // 8: capacity in logical blocks
  uint64_t nuse;           // 16
  uint8_t nsfeat;          // 24
  uint8_t nlbaf;           // 25: number of LBA formats, 0's based
  uint8_t flbas;           // 26: formatted LBA size: index in bits 3:0 (and 6:5 above 16 formats)
  uint8_t mc;              // 27
  uint8_t dpc;             // 28
  uint8_t dps;             // 29
  uint8_t nmic;            // 30
  uint8_t rescap;          // 31
  uint8_t fpi;             // 32
  uint8_t dlfeat;          // 33
  uint16_t nawun;          // 34
  uint16_t nawupf;         // 36
  uint16_t nacwu;          // 38
  uint16_t nabsn;          // 40
  uint16_t nabo;           // 42
  uint16_t nabspf;         // 44
  uint16_t noiob;          // 46
  uint8_t nvmcap[16];      // 48
  uint8_t rsvd64[104 - 64];
  uint8_t nguid[16];       // 104
  uint8_t eui64[8];        // 120
  LbaFormat lbaf[64];      // 128
  uint8_t rsvd384[3840 - 384];
  uint8_t vendor[256];     // 3840

  constexpr uint32_t formatted_lba_index() const { return (flbas & 0xFu) | ((flbas >> 5) & 0x3u) << 4; }
  constexpr uint64_t lba_bytes() const { return lbaf[formatted_lba_index()].data_bytes(); }
};
static_assert(sizeof(IdentifyNamespace) == kIdentifyBytes);
static_assert(offsetof(IdentifyNamespace, ncap) == 8);
static_assert(offsetof(IdentifyNamespace, nuse) == 16);
static_assert(offsetof(IdentifyNamespace, nlbaf) == 25);
static_assert(offsetof(IdentifyNamespace, flbas) == 26);
static_assert(offsetof(IdentifyNamespace, noiob) == 46);
static_assert(offsetof(IdentifyNamespace, nguid) == 104);
static_assert(offsetof(IdentifyNamespace, eui64) == 120);
static_assert(offsetof(IdentifyNamespace, lbaf) == 128);
static_assert(offsetof(IdentifyNamespace, vendor) == 3840);

// Identify CNS 02h: up to 1024 active NSIDs in increasing order, zero terminated.
struct ActiveNamespaceList {
  uint32_t nsid[1024];
};
static_assert(sizeof(ActiveNamespaceList) == kIdentifyBytes);

}  // namespace gpunvme::nvme
