// host/text/lists.h: the one grammar for comma lists in option values, and cli::Args' list getters over it.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "host/text/lists.h"
#include "runtime/cli/args.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;
using Strings = std::vector<std::string>;
using Numbers = std::vector<uint64_t>;

namespace {

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("lists: items between single commas, none empty", "[text][lists]") {
  CHECK(text::split_list("--modes", "a") == Strings{"a"});
  CHECK(text::split_list("--modes", "gpunvme,mmap,mmap-evict") == Strings{"gpunvme", "mmap", "mmap-evict"});
  for (const char* bad : {"a,", ",a", "a,,b"}) {
    INFO(bad);
    CHECK_THROWS_AS(text::split_list("--modes", bad), text::ParseError);
    CHECK_THAT(error_of([&] { text::split_list("--modes", bad); }), ContainsSubstring("--modes: '" + std::string(bad) + "' has an empty item"));
  }
  for (const char* empty : {"", ",", ",,"}) CHECK(error_of([&] { text::split_list("--modes", empty); }) == "--modes is empty");
}

TEST_CASE("lists: numbers in a range, sizes with suffixes", "[text][lists]") {
  CHECK(text::parse_u64_list("--seqs", "1,2,4,16", 1, 64) == Numbers{1, 2, 4, 16});
  CHECK_THAT(error_of([] { text::parse_u64_list("--seqs", "1,0", 1, 64); }), ContainsSubstring("--seqs: 0 is not in 1..64"));
  CHECK_THAT(error_of([] { text::parse_u64_list("--seqs", "1,65", 1, 64); }), ContainsSubstring("65 is not in 1..64"));
  CHECK_THROWS_AS(text::parse_u64_list("--seqs", "1,-2", 1, 64), text::ParseError);
  CHECK_THROWS_AS(text::parse_u64_list("--seqs", "1,2x", 1, 64), text::ParseError);
  CHECK(text::parse_size_list("--vram-budget", "22G,4096,128K") == Numbers{22ull << 30, 4096, 128 << 10});
  CHECK_THROWS_AS(text::parse_size_list("--vram-budget", "22G,,40G"), text::ParseError);
}

TEST_CASE("lists: Args' getters parse the fallback too and fail as usage errors naming the option", "[text][lists][args]") {
  const char* argv[] = {"tool", "--seqs", "8,1", "--budget", "22G,1x"};
  const cli::Args args(5, const_cast<char**>(argv), 1, {"seqs", "budget", "modes"}, {});
  CHECK(args.get_u64_list("seqs", "1", 1, 64) == Numbers{8, 1});
  CHECK(args.get_list("modes", "a,b") == Strings{"a", "b"});
  CHECK_THROWS_AS(args.get_size_list("budget", ""), cli::UsageError);
  CHECK_THAT(error_of([&] { args.get_size_list("budget", "22G"); }), ContainsSubstring("--budget") && ContainsSubstring("(default 22G)"));
  CHECK_THROWS_AS(args.get_list("modes", ""), cli::UsageError);  // an empty fallback is an empty list: refused
}
