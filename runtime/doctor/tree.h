// Read-only access to the machine's sysfs, procfs and /dev under one root, so that the doctor's checks
// run unchanged on a fabricated tree. Paths are absolute as on a real machine ("/sys/class/iommu").
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpunvme::doctor {

struct NodeAccess {
  bool exists = false;
  uint32_t mode = 0;  // permission bits
  uint32_t uid = 0;
  uint32_t gid = 0;
};

class Tree {
 public:
  explicit Tree(std::string root) : root_(std::move(root)) {}
  const std::string& root() const { return root_; }
  std::string path(const std::string& p) const { return root_ + p; }

  bool exists(const std::string& p) const;
  // Whole file, trailing whitespace removed; nullopt when it cannot be read.
  std::optional<std::string> read(const std::string& p) const;
  // Entry names of a directory, sorted, without "." and ".."; empty when missing.
  std::vector<std::string> list(const std::string& p) const;
  // Last path component of a symlink's target ("vfio-pci" for .../drivers/vfio-pci), "" when none.
  std::string link_name(const std::string& p) const;
  NodeAccess access(const std::string& p) const;

 private:
  std::string root_;
};

// Whether `euid` (0: root) may open a node for reading and writing, judged from its mode and owner.
// Group membership is not resolved: a node open to the group only counts as not accessible.
bool read_write_allowed(const NodeAccess& node, uint32_t euid);

// "Max locked memory" soft limit from a /proc/<pid>/limits text: bytes, UINT64_MAX for unlimited,
// nullopt when absent.
std::optional<uint64_t> parse_memlock_limit(const std::string& limits_text);

// A "Key:   123 kB" line of /proc/meminfo as a number (kB values stay in kB), nullopt when absent.
std::optional<uint64_t> meminfo_value(const std::string& meminfo_text, const std::string& key);

}  // namespace gpunvme::doctor
