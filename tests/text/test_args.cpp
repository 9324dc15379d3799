// cli::Args: strict numbers through the shared grammar, and an option given twice is refused.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <string>
#include <vector>

#include "runtime/cli/args.h"

using namespace gpunvme::cli;
using Catch::Matchers::ContainsSubstring;

namespace {
Args parse(std::vector<std::string> words, const std::vector<std::string>& repeatable = {}) {
  words.insert(words.begin(), "tool");
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  return Args(int(argv.size()), argv.data(), 1, {"start-lba", "bs", "time", "device"}, {"force"}, repeatable);
}
std::string usage_error(std::vector<std::string> words, const char* option, bool size = false) {
  try {
    const Args a = parse(std::move(words));
    if (size) a.get_size(option, 0);
    else a.get_u64(option, 0);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}
}  // namespace

TEST_CASE("numbers: decimal only, errors name the option and the text", "[text][args]") {
  CHECK(parse({"--start-lba", "100"}).get_u64("start-lba", 0) == 100);
  CHECK(parse({"--start-lba=2048"}).get_u64("start-lba", 0) == 2048);
  CHECK(parse({"--bs", "128K"}).get_size("bs", 0) == 128ull << 10);
  CHECK(parse({"--time", "0.5"}).get_double("time", 0) == 0.5);
  CHECK_THAT(usage_error({"--start-lba", "0100"}, "start-lba"), ContainsSubstring("--start-lba: '0100' has a leading zero"));
  CHECK_THAT(usage_error({"--start-lba", "-1"}, "start-lba"), ContainsSubstring("--start-lba: '-1' is not a number"));
  CHECK_THAT(usage_error({"--start-lba", "0x10"}, "start-lba"), ContainsSubstring("no 0x"));
  CHECK_THAT(usage_error({"--bs", "-1"}, "bs", true), ContainsSubstring("--bs: '-1' is not a size"));
  CHECK_THAT(usage_error({"--bs", "0x10"}, "bs", true), ContainsSubstring("no 0x"));
  CHECK_THROWS_AS(parse({"--time", "1e3"}).get_double("time", 0), UsageError);
  CHECK_THROWS_AS(parse({"--time", "-1"}).get_double("time", 0), UsageError);
}

TEST_CASE("an option or flag given twice is refused, unless it may repeat", "[text][args]") {
  CHECK_THAT(usage_error({"--start-lba", "1", "--start-lba", "2"}, "start-lba"),
             ContainsSubstring("option --start-lba is given twice"));
  CHECK_THAT(usage_error({"--start-lba=1", "--start-lba", "2"}, "start-lba"), ContainsSubstring("given twice"));
  CHECK_THAT(usage_error({"--force", "--force"}, "start-lba"), ContainsSubstring("option --force is given twice"));
  const Args a = parse({"--device", "emu:ram", "--device=emu:null", "--bs", "4K"}, {"device"});
  CHECK(a.all("device") == std::vector<std::string>{"emu:ram", "emu:null"});
  CHECK(a.get("device") == "emu:null");
  CHECK(a.all("bs") == std::vector<std::string>{"4K"});
  CHECK(parse({}).all("device").empty());
}
