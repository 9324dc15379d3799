#include "runtime/doctor/tree.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

namespace gpunvme::doctor {

bool Tree::exists(const std::string& p) const {
  struct stat st {};
  return ::stat(path(p).c_str(), &st) == 0 || ::lstat(path(p).c_str(), &st) == 0;
}

std::optional<std::string> Tree::read(const std::string& p) const {
  std::ifstream f(path(p));
  if (!f) return std::nullopt;
  std::ostringstream s;
  s << f.rdbuf();
  std::string text = s.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\t')) text.pop_back();
  return text;
}

std::vector<std::string> Tree::list(const std::string& p) const {
  std::vector<std::string> out;
  DIR* d = ::opendir(path(p).c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') out.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string Tree::link_name(const std::string& p) const {
  char buf[4096];
  const ssize_t n = ::readlink(path(p).c_str(), buf, sizeof buf - 1);
  if (n <= 0) return {};
  const std::string target(buf, size_t(n));
  const auto slash = target.rfind('/');
  return slash == std::string::npos ? target : target.substr(slash + 1);
}

NodeAccess Tree::access(const std::string& p) const {
  struct stat st {};
  if (::stat(path(p).c_str(), &st) != 0) return {};
  return {true, uint32_t(st.st_mode & 07777), uint32_t(st.st_uid), uint32_t(st.st_gid)};
}

bool read_write_allowed(const NodeAccess& node, uint32_t euid) {
  if (!node.exists) return false;
  if (euid == 0) return true;
  if (node.uid == euid) return (node.mode & 0600) == 0600;
  return (node.mode & 0006) == 0006;
}

std::optional<uint64_t> parse_memlock_limit(const std::string& limits_text) {
  std::istringstream in(limits_text);
  std::string line;
  const std::string key = "Max locked memory";
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    std::istringstream fields(line.substr(key.size()));
    std::string soft;
    fields >> soft;
    if (soft == "unlimited") return std::numeric_limits<uint64_t>::max();
    char* end = nullptr;
    const unsigned long long v = std::strtoull(soft.c_str(), &end, 10);
    if (soft.empty() || *end != 0) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

std::optional<uint64_t> meminfo_value(const std::string& meminfo_text, const std::string& key) {
  std::istringstream in(meminfo_text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(line.c_str() + key.size() + 1, &end, 10);
    if (end == line.c_str() + key.size() + 1) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

}  // namespace gpunvme::doctor
