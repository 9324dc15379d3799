// cli::Args: strict numbers through the shared grammar, an option given twice is refused, and the
// two-length help (--help, --help-all) with its check that every accepted option is named.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdio>
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

namespace {
// What `print` wrote into a temporary file.
template <class Print>
std::string printed(Print print) {
  FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  print(f);
  std::rewind(f);
  std::string text;
  for (int c; (c = std::fgetc(f)) != EOF;) text += char(c);
  std::fclose(f);
  return text;
}
struct Printed {
  int status;
  std::string text;
};
Printed help_of(const std::vector<std::string>& words, const Help& help) {
  int status = -1;
  const std::string text = printed([&](FILE* f) { status = parse(words).print_help("tool", help, f); });
  return {status, text};
}
}  // namespace

TEST_CASE("help: --help prints the brief part, --help-all the rest too and checks every option is named",
          "[text][args][help]") {
  const Help complete{"usage: tool [--device DEV] [--bs SIZE]\n\n  --force   even so\n",
                      "  --start-lba N  where\n  --time SEC     how long\n"};
  CHECK(parse({"--help"}).help_asked());
  CHECK(parse({"--help-all"}).help_asked());
  CHECK_FALSE(parse({}).help_asked());
  Printed p = help_of({"--help"}, complete);
  CHECK(p.status == 0);
  CHECK(p.text == complete.brief + "\n(tool --help-all: every option and more detail)\n");
  p = help_of({"--help-all"}, complete);
  CHECK(p.status == 0);
  CHECK(p.text == complete.brief + complete.rest);
  // An option the text does not name is a bug that --help-all finds: here --start-lba only appears
  // inside a longer word and --time only as --times.
  const Help missing{"usage: tool [--device DEV] [--bs SIZE] [--force]\n", "  --start-lba-x N\n  --times\n"};
  CHECK(help_of({"--help"}, missing).status == 0);  // the brief help makes no claim to be complete
  CHECK(help_of({"--help-all"}, missing).status == 70);
  CHECK(help_of({"--help-all"}, {missing.brief, missing.rest + "  --start-lba N, --time SEC\n"}).status == 0);
  // With nothing more to say, --help does not point to --help-all.
  CHECK(help_of({"--help"}, {complete.brief + complete.rest, ""}).text == complete.brief + complete.rest);
}

TEST_CASE("help: a usage error quotes the usage lines, not the whole help", "[text][args][help]") {
  const Help h{"usage: tool --device DEV\n       tool --list\n\nWhat it does.\n  --device DEV  where\n", "more\n"};
  CHECK(printed([&](FILE* f) { print_usage_error("tool", UsageError("unknown option --bogus (see --help)"), h, f); }) ==
        "tool: unknown option --bogus (see --help)\nusage: tool --device DEV\n       tool --list\n"
        "(tool --help for the options)\n");
}
