// A small, strict argument parser for the gpunvme tools: --key value / --key=value / --flag,
// unknown options are errors that point to --help, an option given twice is an error. Numbers and
// sizes follow host/text/numbers.h (decimal only; sizes with K/M/G/T = powers of 1024).
//
// Help, one mechanism for every tool (gpunvme and its commands, the benchmarks, the examples): a tool
// describes itself in two parts, `brief` and `rest` (cli::Help). --help prints the brief one, which must
// fit a terminal (kBriefHelpLines, tests/cli checks every tool); --help-all adds the rest. Every Args
// accepts both flags; Args::print_help() prints the one asked for and checks, on --help-all, that the
// help names every option the tool accepts.
#pragma once
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpunvme::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// brief: the usage line(s) first, then what the tool does in a sentence or two and its common options;
// rest: every other option, details, examples, the device strings. A blank line ends the usage lines
// (usage errors quote them).
struct Help {
  std::string brief;
  std::string rest;
};
inline constexpr int kBriefHelpLines = 25;  // --help's output, the line that points to --help-all included

// Prints `help` (the rest too when `all`) to `out`, with a last line pointing to --help-all where
// there is more. For tools that do not parse with Args (gpunvme's command dispatch).
void print_help(FILE* out, const char* tool, const Help& help, bool all);
// "TOOL: MESSAGE", the usage lines and where the options are: what a tool prints on a usage error
// (exit status 2), instead of the whole help.
void print_usage_error(const char* tool, const std::exception& e, const Help& help, FILE* out = stderr);

class Args {
 public:
  // `flags` are options without a value; `options` take one; those also in `repeatable` may be given
  // more than once (all() returns every value, get() the last).
  Args(int argc, char** argv, int first, const std::vector<std::string>& options, const std::vector<std::string>& flags,
       const std::vector<std::string>& repeatable = {});

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> all(const std::string& name) const;  // every value of a repeatable option, in order
  uint64_t get_size(const std::string& name, uint64_t fallback) const;  // accepts K/M/G/T suffixes
  uint64_t get_u64(const std::string& name, uint64_t fallback) const;   // decimal digits only
  uint32_t get_u32(const std::string& name, uint32_t fallback) const;  // get_u64, refusing values above 2^32-1
  double get_double(const std::string& name, double fallback) const;   // a non-negative decimal, e.g. 4 or 0.5
  // Comma-separated lists (host/text/lists.h); `fallback` is parsed the same way when the option is absent.
  std::vector<std::string> get_list(const std::string& name, const std::string& fallback) const;
  std::vector<uint64_t> get_u64_list(const std::string& name, const std::string& fallback, uint64_t lo, uint64_t hi) const;
  std::vector<uint64_t> get_size_list(const std::string& name, const std::string& fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

  // --help or --help-all was given.
  bool help_asked() const { return has("help") || has("help-all"); }
  // Prints the help asked for to `out` and returns the tool's exit status: 0, or 70 (a bug, said on
  // stderr) when --help-all's text does not name every option and flag this Args accepts.
  int print_help(const char* tool, const Help& help, FILE* out = stdout) const;

 private:
  std::vector<std::string> accepted_;  // every option and flag name, for print_help's check
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> repeated_;
  std::vector<std::string> positional_;
};

// "1G" / "128K" / "4096" -> bytes; throws UsageError naming the option.
uint64_t parse_size_arg(const std::string& option, const std::string& text);

}  // namespace gpunvme::cli
