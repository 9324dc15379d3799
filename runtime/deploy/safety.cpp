#include "runtime/deploy/safety.h"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace gpunvme::deploy {
namespace {

constexpr uint64_t kScanBytes = 68u << 10;  // btrfs superblock magic is at 65600

bool has(std::span<const uint8_t> b, uint64_t off, std::string_view magic) {
  return off + magic.size() <= b.size() && std::memcmp(b.data() + off, magic.data(), magic.size()) == 0;
}
uint16_t le16(std::span<const uint8_t> b, uint64_t off) { return uint16_t(b[off] | (b[off + 1] << 8)); }

}  // namespace

std::vector<Signature> scan_signatures(std::span<const uint8_t> b, uint64_t base_lba, uint32_t lba_size) {
  std::vector<Signature> out;
  auto add = [&](uint64_t byte, std::string what) { out.push_back({base_lba + byte / lba_size, std::move(what)}); };
  // A GGUF file or our own record here means a model, which deploy may replace.
  if (has(b, 0, "GGUF") || has(b, 0, "GPUNVMEM")) return out;
  if (b.size() >= 512 && b[510] == 0x55 && b[511] == 0xAA) {
    if (has(b, 3, "NTFS    ")) {
      add(0, "NTFS filesystem");
    } else if (has(b, 82, "FAT32   ") || has(b, 54, "FAT12   ") || has(b, 54, "FAT16   ") || has(b, 54, "FAT     ")) {
      add(0, "FAT (vfat) filesystem");
    } else if (has(b, 3, "EXFAT   ")) {
      add(0, "exFAT filesystem");
    } else {
      int used = 0;
      bool protective = false;
      for (int i = 0; i < 4; ++i) {
        const uint8_t* e = b.data() + 446 + 16 * i;
        if (std::any_of(e, e + 16, [](uint8_t x) { return x != 0; })) ++used;
        if (e[4] == 0xEE) protective = true;
      }
      if (used > 0) {
        add(0, protective ? "protective MBR (GPT disk)"
                          : "MBR partition table with " + std::to_string(used) + " partition" + (used > 1 ? "s" : ""));
      }
    }
  }
  if (has(b, lba_size, "EFI PART")) add(lba_size, "GPT partition table");
  if (b.size() >= 1082 && le16(b, 1080) == 0xEF53) add(1024, "ext2/3/4 filesystem");
  if (has(b, 0, "XFSB")) add(0, "XFS filesystem");
  if (has(b, 65600, "_BHRfS_M")) add(65536, "btrfs filesystem");
  for (uint64_t page : {4096u, 8192u, 16384u, 65536u}) {
    if (has(b, page - 10, "SWAPSPACE2") || has(b, page - 10, "SWAP-SPACE")) {
      add(0, "Linux swap area");
      break;
    }
  }
  if (has(b, 0, "LUKS\xba\xbe")) add(0, "LUKS encrypted volume");
  for (uint64_t s = 0; s < 4; ++s) {
    if (has(b, s * 512, "LABELONE")) {
      add(s * 512, "LVM physical volume");
      break;
    }
  }
  if (has(b, 32769, "CD001")) add(32768, "ISO 9660 filesystem");
  return out;
}

std::vector<Signature> scan_device(const model::BlockIo& io, uint64_t start_lba, bool check_start) {
  std::vector<Signature> out;
  auto scan_at = [&](uint64_t lba) {
    if (io.n_lbas != 0 && lba >= io.n_lbas) return;
    uint64_t blocks = (kScanBytes + io.lba_size - 1) / io.lba_size;
    if (io.n_lbas != 0) blocks = std::min(blocks, io.n_lbas - lba);
    std::vector<uint8_t> buf(blocks * io.lba_size);
    io.read(lba, uint32_t(blocks), buf.data());
    auto found = scan_signatures(buf, lba, io.lba_size);
    out.insert(out.end(), found.begin(), found.end());
  };
  scan_at(0);
  if (check_start && start_lba != 0) scan_at(start_lba);
  return out;
}

}  // namespace gpunvme::deploy
