// A small, strict argument parser for the gpunvme tools: --key value / --key=value / --flag,
// unknown options are errors that point to --help, an option given twice is an error. Numbers and
// sizes follow host/text/numbers.h (decimal only; sizes with K/M/G/T = powers of 1024).
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpunvme::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

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
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> repeated_;
  std::vector<std::string> positional_;
};

// "1G" / "128K" / "4096" -> bytes; throws UsageError naming the option.
uint64_t parse_size_arg(const std::string& option, const std::string& text);

}  // namespace gpunvme::cli
