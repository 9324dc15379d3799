#include "runtime/cli/args.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "host/text/lists.h"
#include "host/text/numbers.h"

namespace gpunvme::cli {

namespace {

bool known(const std::vector<std::string>& v, const std::string& n) { return std::find(v.begin(), v.end(), n) != v.end(); }

// Whether `text` spells the option `name` as a whole word: --name, or -n for a one-letter name.
bool names_option(const std::string& text, const std::string& name) {
  const std::string spelled = (name.size() == 1 ? "-" : "--") + name;
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; };
  for (size_t at = text.find(spelled); at != std::string::npos; at = text.find(spelled, at + 1)) {
    const size_t end = at + spelled.size();
    if ((at == 0 || !word_char(text[at - 1])) && (end == text.size() || !word_char(text[end]))) return true;
  }
  return false;
}

// The usage lines: the brief help up to its first blank line.
std::string usage_lines(const Help& help) {
  const size_t blank = help.brief.find("\n\n");
  return blank == std::string::npos ? help.brief : help.brief.substr(0, blank + 1);
}

}  // namespace

void print_help(FILE* out, const char* tool, const Help& help, bool all) {
  std::fputs(help.brief.c_str(), out);
  if (all) std::fputs(help.rest.c_str(), out);
  else if (!help.rest.empty()) std::fprintf(out, "\n(%s --help-all: every option and more detail)\n", tool);
}

void print_usage_error(const char* tool, const std::exception& e, const Help& help, FILE* out) {
  std::fprintf(out, "%s: %s\n%s(%s --help for the options)\n", tool, e.what(), usage_lines(help).c_str(), tool);
}

int Args::print_help(const char* tool, const Help& help, FILE* out) const {
  const bool all = has("help-all");
  cli::print_help(out, tool, help, all);
  if (!all) return 0;
  std::string missing;
  for (const std::string& name : accepted_)
    if (name != "help" && name != "help-all" && !names_option(help.brief + help.rest, name))
      missing += std::string(missing.empty() ? "" : ", ") + (name.size() == 1 ? "-" : "--") + name;
  if (missing.empty()) return 0;
  std::fflush(out);
  std::fprintf(stderr, "%s: bug: --help-all does not describe %s, which the tool accepts\n", tool, missing.c_str());
  return 70;
}

Args::Args(int argc, char** argv, int first, const std::vector<std::string>& options,
           const std::vector<std::string>& flags, const std::vector<std::string>& repeatable) {
  accepted_ = options;
  accepted_.insert(accepted_.end(), flags.begin(), flags.end());
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
    if (known(flags, name) || name == "help" || name == "help-all") {
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

namespace {

// A list's errors name the default, which is what an empty or mistyped list most often meant.
template <class F>
auto list_of(const Args& args, const std::string& name, const std::string& fallback, F parse) {
  try {
    return parse("--" + name, args.get(name, fallback));
  } catch (const text::ParseError& e) {
    throw UsageError(std::string(e.what()) + (fallback.empty() ? "" : " (default " + fallback + ")"));
  }
}

}  // namespace

std::vector<std::string> Args::get_list(const std::string& name, const std::string& fallback) const {
  return list_of(*this, name, fallback, [](const std::string& w, const std::string& t) { return text::split_list(w, t); });
}

std::vector<uint64_t> Args::get_u64_list(const std::string& name, const std::string& fallback, uint64_t lo, uint64_t hi) const {
  return list_of(*this, name, fallback,
                 [&](const std::string& w, const std::string& t) { return text::parse_u64_list(w, t, lo, hi); });
}

std::vector<uint64_t> Args::get_size_list(const std::string& name, const std::string& fallback) const {
  return list_of(*this, name, fallback, [](const std::string& w, const std::string& t) { return text::parse_size_list(w, t); });
}

}  // namespace gpunvme::cli
