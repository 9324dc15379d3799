// What bytes a path reaches, so that a file a tool is about to write can be compared with the devices
// of its run (output_file.h). Linux names the same bytes in several ways, and each is followed here:
//   - a regular file is its inode (another path, a hard link or a symlink to it is the same file);
//   - a block device is its device number, and also the disk holding it when it is a partition
//     (/sys/dev/block/MAJ:MIN/partition; the disk is the parent sysfs directory, its `dev` file);
//   - a loop device, or a partition of one, is also the file behind it (/sys/block/loopN/loop/
//     backing_file, compared by inode, so any spelling of that file matches).
// Reading sysfs from `sysfs_root` lets tests lay out a fake tree (tests/guard).
#pragma once
#include <sys/stat.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpunvme::guard {

struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId&) const = default;
};

struct Footprint {
  std::string path;               // as given, for messages
  std::optional<FileId> file;     // a regular file: its inode
  dev_t block = 0;                // a block device: its number (0: not a block device)
  dev_t disk = 0;                 // a partition: the number of the disk holding it (0: not a partition)
  std::string disk_name;          // that disk's sysfs name ("sda", "loop0"), for messages
  std::optional<FileId> backing;  // a loop device or a partition of one: the file behind it
  std::string backing_path;       // as sysfs names it
};

// The footprint of what `st` (stat() of `path`) describes.
Footprint footprint_of(const struct stat& st, const std::string& path, const std::string& sysfs_root = "/sys");

// stat() of `path`, following symlinks, then footprint_of; nullopt when it does not exist (or cannot
// be stat()ed).
std::optional<Footprint> footprint_of(const std::string& path, const std::string& sysfs_root = "/sys");

// How `a` shares bytes with `b`, as words that follow "it " in a message naming `a` ("is the same
// file as /tmp/m.img", "is a partition of /dev/loop0", "is a loop device backed by /tmp/m.img"); ""
// when they share none.
std::string shared_bytes(const Footprint& a, const Footprint& b);

// The backing files of a device string's namespaces: the image (or block device) of each namespace
// of an emu: device (PATH, PATH.2, ... with namespaces=N); nothing for emu:ram, emu:null, vfio:
// (whose namespaces are no paths while it is bound to vfio-pci) or anything else. An emu: string the
// emulator would refuse still yields its PATH: the check must not depend on the string being valid.
std::vector<std::string> backing_paths(std::string_view device);

}  // namespace gpunvme::guard
