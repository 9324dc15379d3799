#include "runtime/cli/args.h"

#include <algorithm>
#include <limits>

#include "host/text/numbers.h"

namespace gpunvme::cli {

Args::Args(int argc, char** argv, int first, const std::vector<std::string>& options,
           const std::vector<std::string>& flags, const std::vector<std::string>& repeatable) {
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
    if (values_.count(name) != 0 && !known(repeatable, name))
      throw UsageError("option --" + name + " is given twice; give it once");
    if (known(flags, name)) {
      if (inline_value) throw UsageError("option --" + name + " takes no value");
      values_[name] = "1";
    } else if (known(options, name)) {
      if (!inline_value) {
        if (i + 1 >= argc) throw UsageError("option --" + name + " needs a value");
        value = argv[++i];
      }
      values_[name] = value;
      repeated_[name].push_back(value);
    } else {
      throw UsageError("unknown option --" + name + " (see --help)");
    }
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::vector<std::string> Args::all(const std::string& name) const {
  auto it = repeated_.find(name);
  return it == repeated_.end() ? std::vector<std::string>{} : it->second;
}

namespace {

// The shared grammar (host/text/numbers.h), its errors as usage errors naming the option.
template <class F>
auto strict(const std::string& option, const std::string& value, F parse) {
  try {
    return parse("--" + option, value);
  } catch (const text::ParseError& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

uint64_t parse_size_arg(const std::string& option, const std::string& value) {
  return strict(option, value, [](const std::string& w, const std::string& t) { return text::parse_size(w, t); });
}

uint64_t Args::get_size(const std::string& name, uint64_t fallback) const {
  return has(name) ? parse_size_arg(name, get(name)) : fallback;
}

uint64_t Args::get_u64(const std::string& name, uint64_t fallback) const {
  if (!has(name)) return fallback;
  return strict(name, get(name), [](const std::string& w, const std::string& t) { return text::parse_u64(w, t); });
}

uint32_t Args::get_u32(const std::string& name, uint32_t fallback) const {
  const uint64_t x = get_u64(name, fallback);
  if (x > std::numeric_limits<uint32_t>::max()) throw UsageError("--" + name + ": '" + get(name) + "' is too large");
  return uint32_t(x);
}

double Args::get_double(const std::string& name, double fallback) const {
  if (!has(name)) return fallback;
  return strict(name, get(name), [](const std::string& w, const std::string& t) { return text::parse_decimal(w, t); });
}

}  // namespace gpunvme::cli
