#include "runtime/deploy/safety.h"

#include <blkid/blkid.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>

#include "runtime/model/deploy_record.h"
#include "runtime/model/model_error.h"
#include "runtime/model/stripe.h"

namespace gpunvme::deploy {
namespace {

// Per window: ZFS labels 0 and 1 (512 KiB), btrfs (64 KiB), ISO 9660 (32 KiB) and nearly every
// other superblock libblkid knows lie within the first MiB of what they describe.
constexpr uint64_t kScanBytes = 1u << 20;
// Where the device size is unknown: large enough for every libblkid prober to run.
constexpr uint64_t kDefaultAreaBytes = 1ull << 30;

bool has(std::span<const uint8_t> b, uint64_t off, std::string_view magic) {
  return off + magic.size() <= b.size() && std::memcmp(b.data() + off, magic.data(), magic.size()) == 0;
}
uint16_t le16(std::span<const uint8_t> b, uint64_t off) { return uint16_t(b[off] | (b[off + 1] << 8)); }

// A GGUF file or our own record at the start of a window means a model, which deploy may replace.
bool starts_with_model(std::span<const uint8_t> b) {
  return has(b, 0, "GGUF") || model::has_record_magic(b) || model::has_stripe_magic(b);
}

// The common cases by their magic numbers, also when the rest of the structure is damaged.
std::vector<Signature> known_magics(std::span<const uint8_t> b, uint64_t base_lba, uint32_t lba_size) {
  std::vector<Signature> out;
  auto add = [&](uint64_t byte, std::string what) { out.push_back({base_lba + byte / lba_size, std::move(what)}); };
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

std::string blkid_what(blkid_probe pr) {
  const char* v = nullptr;
  if (blkid_probe_lookup_value(pr, "PTTYPE", &v, nullptr) == 0) return std::string(v) + " partition table (libblkid)";
  if (blkid_probe_lookup_value(pr, "TYPE", &v, nullptr) != 0) return "";
  std::string what = v;
  const char* usage = nullptr;
  blkid_probe_lookup_value(pr, "USAGE", &usage, nullptr);
  const std::string u = usage ? usage : "";
  what += u == "filesystem" ? " filesystem" : u == "raid" ? " RAID/volume member" : u == "crypto" ? " encrypted volume" : " signature";
  return what + " (libblkid)";
}

uint64_t blkid_offset(blkid_probe pr) {
  const char* v = nullptr;
  if (blkid_probe_lookup_value(pr, "SBMAGIC_OFFSET", &v, nullptr) != 0 &&
      blkid_probe_lookup_value(pr, "PTMAGIC_OFFSET", &v, nullptr) != 0)
    return 0;
  return std::strtoull(v, nullptr, 10);
}

// Everything libblkid (the probe behind blkid, wipefs, mkfs) recognises in the bytes, probed from a
// memfd: the bytes were read through our driver, which the kernel cannot see as a block device,
// and libblkid probes file descriptors; a memfd is one with no file left behind.
// `area_bytes` (>= b.size()) is how far the device goes on: the memfd gets that size (zeros past the
// window), because some probers skip devices they think are small (ZFS below 64 MiB).
std::vector<Signature> libblkid_signatures(std::span<const uint8_t> b, uint64_t base_lba, uint32_t lba_size,
                                           uint64_t area_bytes) {
  std::vector<Signature> out;
  const int fd = ::memfd_create("gpunvme-signature-scan", MFD_CLOEXEC);
  if (fd < 0) throw model::ModelError(std::string("memfd_create for the signature scan: ") + std::strerror(errno));
  std::unique_ptr<int, void (*)(int*)> close_fd(new int(fd), [](int* f) { ::close(*f); delete f; });
  for (size_t done = 0; done < b.size();) {
    const ssize_t w = ::write(fd, b.data() + done, b.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw model::ModelError(std::string("writing the signature scan's memfd: ") + std::strerror(errno));
    done += size_t(w);
  }
  // Sparse past the window: holes cost no memory. Kept under the file size limit (ulimit -f), which
  // would otherwise end the process with SIGXFSZ.
  struct rlimit fsize{};
  if (::getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY)
    area_bytes = std::min<uint64_t>(area_bytes, fsize.rlim_cur);
  area_bytes = std::max<uint64_t>(area_bytes, b.size());
  if (::ftruncate(fd, off_t(area_bytes)) != 0)
    throw model::ModelError(std::string("sizing the signature scan's memfd: ") + std::strerror(errno));
  std::unique_ptr<std::remove_pointer_t<blkid_probe>, void (*)(blkid_probe)> pr(blkid_new_probe(), blkid_free_probe);
  if (!pr || blkid_probe_set_device(pr.get(), fd, 0, blkid_loff_t(area_bytes)) != 0)
    throw model::ModelError("libblkid could not set up a probe for the signature scan");
  blkid_probe_set_sectorsize(pr.get(), lba_size);
  blkid_probe_enable_superblocks(pr.get(), 1);
  blkid_probe_set_superblocks_flags(pr.get(), BLKID_SUBLKS_TYPE | BLKID_SUBLKS_USAGE | BLKID_SUBLKS_MAGIC);
  blkid_probe_enable_partitions(pr.get(), 1);
  blkid_probe_set_partitions_flags(pr.get(), BLKID_PARTS_MAGIC);
  while (blkid_do_probe(pr.get()) == 0) {  // one result per call, every chain (as wipefs does)
    std::string what = blkid_what(pr.get());
    if (!what.empty()) out.push_back({base_lba + blkid_offset(pr.get()) / lba_size, std::move(what)});
  }
  return out;
}

// The first non-zero byte in b[from, to), as a refusal: data that is neither a model of ours nor
// anything libblkid knows is still somebody's data.
void add_unknown_data(std::span<const uint8_t> b, uint64_t from, uint64_t to, uint64_t base_lba, uint32_t lba_size,
                      std::vector<Signature>& out) {
  to = std::min<uint64_t>(to, b.size());
  if (from >= to) return;
  const auto it = std::find_if(b.begin() + from, b.begin() + to, [](uint8_t x) { return x != 0; });
  if (it == b.begin() + to) return;
  const uint64_t at = uint64_t(it - b.begin());
  out.push_back({base_lba + at / lba_size, "non-zero data of unknown origin (not a gpunvme record, a GGUF, or a "
                                           "format libblkid knows; first at byte " +
                                               std::to_string(base_lba * lba_size + at) + ")",
                 /*known_format=*/false});
}

}  // namespace

std::vector<Signature> scan_signatures(std::span<const uint8_t> b, uint64_t base_lba, uint32_t lba_size,
                                       uint64_t area_bytes) {
  if (starts_with_model(b)) return {};
  auto out = known_magics(b, base_lba, lba_size);
  if (out.empty()) out = libblkid_signatures(b, base_lba, lba_size, area_bytes ? area_bytes : kDefaultAreaBytes);
  return out;
}

std::vector<Signature> scan_device(const model::BlockIo& io, uint64_t start_lba, bool check_start) {
  std::vector<Signature> out;
  const uint64_t lba = io.lba_size;
  auto read_window = [&](uint64_t first) {
    uint64_t blocks = (kScanBytes + lba - 1) / lba;
    if (io.n_lbas != 0) blocks = std::min(blocks, first < io.n_lbas ? io.n_lbas - first : 0);
    std::vector<uint8_t> buf(blocks * lba);
    if (blocks > 0) io.read(first, uint32_t(blocks), buf.data());
    return buf;
  };
  // A record of ours at LBA 0 means the device was given to gpunvme before (checked, or --force):
  // leftovers of what was there then, or of an older model, are not a reason to refuse again.
  const auto head = read_window(0);
  const bool ours = model::has_record_magic(head) || model::has_stripe_magic(head);
  auto scan = [&](const std::vector<uint8_t>& w, uint64_t first, uint64_t unknown_end) {
    const uint64_t area = io.n_lbas > first ? (io.n_lbas - first) * lba : 0;
    auto found = scan_signatures(w, first, io.lba_size, area);
    if (found.empty() && !ours && !starts_with_model(w)) add_unknown_data(w, 0, unknown_end, first, io.lba_size, found);
    out.insert(out.end(), found.begin(), found.end());
  };
  // Unknown data at LBA 0 counts up to the start LBA: from there on the start window judges it (or,
  // with --record-only, it is the model dd wrote).
  scan(head, 0, start_lba == 0 ? head.size() : std::min<uint64_t>(head.size(), start_lba * lba));
  if (check_start && start_lba != 0) scan(read_window(start_lba), start_lba, kScanBytes);
  return out;
}

namespace {

// A regular file as 512-byte blocks (the last one zero-padded), read-only: what scan_device reads.
model::BlockIo file_blocks(int fd, uint64_t size, const std::string& path) {
  model::BlockIo io;
  io.lba_size = 512;
  io.n_lbas = (size + 511) / 512;
  io.name = path;
  io.read = [fd, size, path](uint64_t lba, uint32_t count, void* dst) {
    auto* out = static_cast<uint8_t*>(dst);
    const uint64_t off = lba * 512, len = uint64_t(count) * 512;
    std::memset(out, 0, len);
    for (uint64_t done = 0; off + done < size && done < len;) {
      const ssize_t r = ::pread(fd, out + done, std::min(len - done, size - off - done), off_t(off + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw model::ModelError("reading " + path + ": " + (r == 0 ? "it shrank" : std::strerror(errno)));
      done += uint64_t(r);
    }
  };
  return io;
}

// Our own record at byte 0, as a Signature: what a file written over the image destroys.
std::vector<Signature> our_record(const model::BlockIo& io) {
  std::vector<uint8_t> head(io.lba_size);
  io.read(0, 1, head.data());
  if (model::has_stripe_magic(head)) {
    try {
      return {{0, "a gpunvme striped-set record (" + model::describe_member(model::parse_stripe_record(head, io.name), io.name) + ")"}};
    } catch (const model::ModelError&) {
      return {{0, "a damaged gpunvme striped-set record"}};
    }
  }
  if (!model::has_record_magic(head)) return {};
  try {
    const model::DeployRecord r = model::parse_record(head, model::kRecordLba);
    return {{0, "a gpunvme deploy record: an image holding the deployed model '" + r.name + "'"}};
  } catch (const model::ModelError&) {
    return {{0, "a damaged gpunvme deploy record"}};
  }
}

}  // namespace

std::vector<Signature> scan_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return {};  // nothing there to destroy (or nothing this scan can read: the writer reports it)
  std::unique_ptr<int, void (*)(int*)> close_fd(new int(fd), [](int* f) { ::close(*f); delete f; });
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return {};
  const model::BlockIo io = file_blocks(fd, uint64_t(st.st_size), path);
  std::vector<Signature> found = our_record(io);
  if (found.empty()) found = scan_device(io, 0);
  return found;
}

std::string signature_list(const std::vector<Signature>& found, uint32_t block_bytes) {
  std::string s;
  for (const Signature& f : found)
    s += (s.empty() ? "" : ", ") + f.what +
         (block_bytes ? " at byte " + std::to_string(f.lba * block_bytes) : " at LBA " + std::to_string(f.lba));
  return s;
}

}  // namespace gpunvme::deploy
