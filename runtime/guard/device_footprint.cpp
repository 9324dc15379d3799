#include "runtime/guard/device_footprint.h"

#include <sys/sysmacros.h>

#include <filesystem>
#include <fstream>

#include "host/emulator/config.h"

namespace gpunvme::guard {
namespace {

namespace fs = std::filesystem;

// The first line of a sysfs attribute, or "" when it cannot be read.
std::string read_line(const fs::path& p) {
  std::ifstream f(p);
  std::string line;
  std::getline(f, line);
  return line;
}

// "8:1" -> makedev(8, 1); 0 when it is not that.
dev_t parse_dev(const std::string& s) {
  unsigned maj = 0, min = 0;
  char end = 0;
  if (std::sscanf(s.c_str(), "%u:%u%c", &maj, &min, &end) != 2) return 0;
  return makedev(maj, min);
}

// The block device's sysfs directory (/sys/dev/block/MAJ:MIN resolved), or "" when sysfs lacks it.
fs::path sysfs_dir(dev_t rdev, const std::string& sysfs_root) {
  std::error_code ec;
  const fs::path link = fs::path(sysfs_root) / "dev" / "block" /
                        (std::to_string(major(rdev)) + ":" + std::to_string(minor(rdev)));
  const fs::path dir = fs::canonical(link, ec);
  return ec ? fs::path() : dir;
}

// Fills in the disk a partition belongs to and the file behind a loop device.
void add_block_relations(Footprint& f, const std::string& sysfs_root) {
  const fs::path dir = sysfs_dir(f.block, sysfs_root);
  if (dir.empty()) return;
  std::error_code ec;
  fs::path disk_dir = dir;
  if (fs::exists(dir / "partition", ec)) {
    disk_dir = dir.parent_path();
    f.disk = parse_dev(read_line(disk_dir / "dev"));
  }
  f.disk_name = disk_dir.filename().string();
  std::string backing = read_line(disk_dir / "loop" / "backing_file");
  if (backing.empty()) return;
  // The kernel appends " (deleted)" once the file is unlinked: nothing can name it any more.
  const std::string_view deleted = " (deleted)";
  if (backing.ends_with(deleted)) return;
  struct stat st{};
  if (::stat(backing.c_str(), &st) != 0) return;
  f.backing = FileId{st.st_dev, st.st_ino};
  f.backing_path = backing;
}

}  // namespace

Footprint footprint_of(const struct stat& st, const std::string& path, const std::string& sysfs_root) {
  Footprint f;
  f.path = path;
  if (S_ISREG(st.st_mode)) f.file = FileId{st.st_dev, st.st_ino};
  if (S_ISBLK(st.st_mode)) {
    f.block = st.st_rdev;
    add_block_relations(f, sysfs_root);
  }
  return f;
}

std::optional<Footprint> footprint_of(const std::string& path, const std::string& sysfs_root) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return footprint_of(st, path, sysfs_root);
}

std::string shared_bytes(const Footprint& a, const Footprint& b) {
  const std::string same = a.path == b.path ? "is " + b.path : "is the same file as " + b.path;
  if (a.file && a.file == b.file) return same;
  if (a.file && a.file == b.backing)
    return "is the file behind " + b.path + (b.disk ? " (a partition of loop device " + b.disk_name + ")" : " (a loop device)");
  if (a.block && a.block == b.block) return a.path == b.path ? "is " + b.path : "is the block device " + b.path;
  if (a.disk && a.disk == b.block) return "is a partition of " + b.path;
  if (b.disk && a.block == b.disk) return "is the disk that holds " + b.path;
  if (a.backing && a.backing == b.file)
    return std::string(a.disk ? "is a partition of loop device " + a.disk_name + ", " : "is a loop device ") +
           "backed by " + b.path;
  if (a.backing && a.backing == b.backing) return "is backed by " + a.backing_path + ", the file behind " + b.path;
  return "";
}

std::vector<std::string> backing_paths(std::string_view device) {
  if (!emu::is_emu_device(device)) return {};
  std::vector<std::string> out;
  try {
    for (const emu::NamespaceConfig& ns : emu::parse_emu_device(device).namespaces)
      if (ns.backing == emu::Backing::kFile) out.push_back(ns.path);
  } catch (const std::exception&) {
    const std::string_view rest = device.substr(4);
    const std::string path(rest.substr(0, rest.find(',')));
    if (!path.empty() && path != "ram" && path != "null") out.push_back(path);
  }
  return out;
}

}  // namespace gpunvme::guard
