#include "runtime/cli/args.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace gpunvme::cli {

Args::Args(int argc, char** argv, int first, const std::vector<std::string>& options,
           const std::vector<std::string>& flags) {
  auto known = [](const std::vector<std::string>& v, const std::string& n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (known(flags, name)) {
      if (inline_value) throw UsageError("option --" + name + " takes no value");
      values_[name] = "1";
    } else if (known(options, name)) {
      if (!inline_value) {
        if (i + 1 >= argc) throw UsageError("option --" + name + " needs a value");
        value = argv[++i];
      }
      values_[name] = value;
    } else {
      throw UsageError("unknown option --" + name + " (see --help)");
    }
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

uint64_t parse_size_arg(const std::string& option, const std::string& text) {
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos, 0);
  } catch (...) {
    throw UsageError("--" + option + ": '" + text + "' is not a size (examples: 4096, 128K, 1M, 2G)");
  }
  std::string suffix = text.substr(pos);
  uint64_t mult = 1;
  if (!suffix.empty()) {
    const char c = char(std::toupper(static_cast<unsigned char>(suffix[0])));
    const std::string rest = suffix.substr(1);
    if (rest != "" && rest != "B" && rest != "iB" && rest != "b")
      throw UsageError("--" + option + ": '" + text + "' has an unknown unit");
    switch (c) {
      case 'K': mult = 1ull << 10; break;
      case 'M': mult = 1ull << 20; break;
      case 'G': mult = 1ull << 30; break;
      case 'T': mult = 1ull << 40; break;
      case 'B': mult = 1; break;
      default: throw UsageError("--" + option + ": '" + text + "' has an unknown unit (use K, M, G or T)");
    }
  }
  if (mult != 1 && v > (~0ull) / mult) throw UsageError("--" + option + ": '" + text + "' is too large");
  return v * mult;
}

uint64_t Args::get_size(const std::string& name, uint64_t fallback) const {
  return has(name) ? parse_size_arg(name, get(name)) : fallback;
}

uint64_t Args::get_u64(const std::string& name, uint64_t fallback) const {
  if (!has(name)) return fallback;
  const std::string v = get(name);
  size_t pos = 0;
  unsigned long long x = 0;
  try {
    x = std::stoull(v, &pos, 0);
  } catch (...) {
    pos = 0;
  }
  if (pos != v.size() || v.empty()) throw UsageError("--" + name + ": '" + v + "' is not a number");
  return x;
}

uint32_t Args::get_u32(const std::string& name, uint32_t fallback) const {
  const uint64_t x = get_u64(name, fallback);
  if (x > std::numeric_limits<uint32_t>::max()) throw UsageError("--" + name + ": '" + get(name) + "' is too large");
  return uint32_t(x);
}

double Args::get_double(const std::string& name, double fallback) const {
  if (!has(name)) return fallback;
  const std::string v = get(name);
  char* end = nullptr;
  const double x = v.empty() ? 0 : std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x))
    throw UsageError("--" + name + ": '" + v + "' is not a number");
  return x;
}

}  // namespace gpunvme::cli
